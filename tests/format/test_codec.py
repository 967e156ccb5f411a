"""Encoder/decoder round trips: every scalar kind, enums, unions, vectors of scalars/strings/tables.

A private test schema exercises the codec's generality; the TFLite schema and
the official generated bindings check wire compatibility.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from litegpu.errors import ModelFormatError
from litegpu.format import Decoder, Encoder, decode_model, encode_model, load_schema
from litegpu.format.schema import SCALARS

TEST_SCHEMA = """
namespace test;
file_identifier "TST1";
enum Color : byte { RED = -1, GREEN, BLUE = 5 }
table Leaf { name: string; weight: float = 1.5; }
table Other { code: ulong; }
union Payload { Leaf, Other }
table All {
  b: bool = true; i8: byte = -3; u8: ubyte; i16: short; u16: ushort; i32: int = 7; u32: uint;
  i64: long; u64: ulong; f32: float = 0.5; f64: double; color: Color = GREEN;
  text: string; leaf: Leaf; payload: Payload;
  ints: [int]; bytes_: [ubyte]; doubles: [double]; colors: [Color];
  names: [string]; leaves: [Leaf];
  old: int (deprecated); after_old: short = 9;
}
root_type All;
"""

EXTREMES = {
    "b": [False, True], "i8": [-128, 127], "u8": [0, 255], "i16": [-32768, 32767], "u16": [0, 65535],
    "i32": [-2**31, 2**31 - 1], "u32": [0, 2**32 - 1], "i64": [-2**63, 2**63 - 1], "u64": [0, 2**64 - 1],
    "f32": [-3.0e38, 1.0e-38], "f64": [-1.7e308, 5e-324],
}


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "test.fbs"
    path.write_text(TEST_SCHEMA)
    return load_schema(path)


def roundtrip(schema, value: dict) -> dict:
    data = bytes(Encoder(schema).finish("All", value, b"TST1"))
    return Decoder(data, "<test>", schema).root("All", b"TST1")


def test_test_schema_parses_slots_and_defaults(schema):
    table = schema.tables["All"]
    slots = {f.name: f.slot for f in table.fields}
    assert slots["payload"] == 15 and slots["ints"] == 16  # a union takes two slots
    assert slots["after_old"] == slots["old"] + 1
    defaults = schema.defaults("All")
    assert defaults["b"] is True and defaults["i8"] == -3 and defaults["color"] == "GREEN"
    assert schema.enums["Color"].values == {"RED": -1, "GREEN": 0, "BLUE": 5}
    assert "old" not in defaults


def test_absent_fields_decode_to_defaults(schema):
    out = roundtrip(schema, {})
    assert out["b"] is True and out["i8"] == -3 and out["i32"] == 7 and out["f32"] == 0.5
    assert out["color"] == "GREEN" and out["after_old"] == 9
    for key in ("text", "leaf", "payload", "payload_type", "ints", "names", "leaves"):
        assert out[key] is None


@pytest.mark.parametrize("which", [0, 1])
def test_every_scalar_kind_at_its_extremes(schema, which):
    value = {k: v[which] for k, v in EXTREMES.items()}
    out = roundtrip(schema, value)
    for key, expected in value.items():
        if key == "f32":
            assert out[key] == pytest.approx(expected, rel=1e-6)
        else:
            assert out[key] == expected, key


@pytest.mark.parametrize("color", ["RED", "GREEN", "BLUE"])
def test_enum_values_by_name(schema, color):
    assert roundtrip(schema, {"color": color})["color"] == color


def test_unknown_enum_value_decodes_as_its_number(schema):
    assert roundtrip(schema, {"color": 42})["color"] == 42


@pytest.mark.parametrize("member,body", [("Leaf", {"name": "x", "weight": -2.0}), ("Other", {"code": 2**64 - 1})])
def test_union_members(schema, member, body):
    out = roundtrip(schema, {"payload_type": member, "payload": body})
    assert out["payload_type"] == member
    for key, value in body.items():
        assert out["payload"][key] == value


def test_vectors_of_scalars_strings_and_tables(schema):
    value = {
        "ints": [-1, 0, 2**31 - 1], "bytes_": np.arange(256, dtype=np.uint8), "doubles": [math.pi, -0.0],
        "colors": ["BLUE", "RED"], "names": ["", "a", "ünïcödé", "x" * 1000],
        "leaves": [{"name": "p"}, {"weight": 3.0}, {}], "text": "hello", "leaf": {"name": "solo"},
    }
    out = roundtrip(schema, value)
    assert out["ints"].tolist() == value["ints"]
    assert out["bytes_"].dtype == np.uint8 and np.array_equal(out["bytes_"], value["bytes_"])
    assert out["doubles"].tolist() == value["doubles"]
    assert out["colors"].tolist() == [5, -1]  # enum vectors stay raw numbers
    assert out["names"] == value["names"]
    assert [leaf["name"] for leaf in out["leaves"]] == ["p", None, None]
    assert [leaf["weight"] for leaf in out["leaves"]] == [1.5, 3.0, 1.5]
    assert out["text"] == "hello" and out["leaf"]["name"] == "solo"


def test_empty_vectors_are_present_not_absent(schema):
    out = roundtrip(schema, {"ints": [], "names": [], "leaves": []})
    assert out["ints"].size == 0 and out["names"] == [] and out["leaves"] == []


def test_scalar_vectors_are_views_not_copies(schema):
    data = bytes(Encoder(schema).finish("All", {"doubles": np.arange(1000.0)}, b"TST1"))
    out = Decoder(data, "<test>", schema).root("All", b"TST1")
    assert out["doubles"].base is not None and not out["doubles"].flags.owndata


def test_decoder_checks_identifier(schema):
    data = bytes(Encoder(schema).finish("All", {}, b"TST1"))
    with pytest.raises(ModelFormatError, match="identifier"):
        Decoder(data, "<test>", schema).root("All", b"TFL3")


def test_scalars_table_covers_every_flatbuffers_scalar():
    assert set(SCALARS) == {"bool", "byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong",
                            "float", "double"}


def test_tflite_model_round_trip_and_official_reader():
    generated = pytest.importorskip("ai_edge_litert.schema_py_generated")
    root = {
        "version": 3, "description": "codec test",
        "operator_codes": [{"deprecated_builtin_code": 3, "builtin_code": "CONV_2D", "version": 2},
                           {"deprecated_builtin_code": 127, "builtin_code": "STABLEHLO_COMPOSITE"}],
        "buffers": [{}, {"data": np.arange(16, dtype=np.uint8)}, {"offset": 1234, "size": 99}],
        "subgraphs": [{
            "name": "main",
            "tensors": [{"shape": [1, 2, 3, 4], "type": "INT4", "buffer": 1, "name": "t",
                         "quantization": {"scale": [0.5, 0.25], "zero_point": [0, 1], "quantized_dimension": 3,
                                          "details_type": "BlockwiseQuantization",
                                          "details": {"scales": 1, "zero_points": -1, "block_size": 32}}}],
            "operators": [{"opcode_index": 0, "inputs": [0, -1], "outputs": [0],
                           "builtin_options_type": "Conv2DOptions",
                           "builtin_options": {"padding": "VALID", "stride_w": 2, "fused_activation_function": "RELU6"}},
                          {"opcode_index": 1, "inputs": [0], "outputs": [0],
                           "builtin_options_2_type": "StableHLOCompositeOptions",
                           "builtin_options_2": {"name": "odml.rms_norm", "decomposition_subgraph_index": 0},
                           "large_custom_options_offset": 4096, "large_custom_options_size": 8}],
            "inputs": [0], "outputs": [0]}],
        "signature_defs": [{"signature_key": "serving", "subgraph_index": 0,
                            "inputs": [{"name": "in", "tensor_index": 0}], "outputs": []}],
    }
    data = bytes(encode_model(root))
    back = decode_model(data).root
    t = back["subgraphs"][0]["tensors"][0]
    assert t["type"] == "INT4" and t["quantization"]["details"]["block_size"] == 32
    op0, op1 = back["subgraphs"][0]["operators"]
    assert op0["builtin_options"]["padding"] == "VALID" and op0["builtin_options"]["stride_w"] == 2
    assert op1["builtin_options_2_type"] == "StableHLOCompositeOptions"
    assert op1["builtin_options_2"]["name"] == "odml.rms_norm"
    assert back["buffers"][2]["offset"] == 1234

    # The official generated reader sees the same values at the same places.
    m = generated.Model.GetRootAs(data, 0)
    assert m.Version() == 3 and m.Description() == b"codec test"
    assert m.OperatorCodes(0).BuiltinCode() == generated.BuiltinOperator.CONV_2D
    assert m.OperatorCodes(1).BuiltinCode() == generated.BuiltinOperator.STABLEHLO_COMPOSITE
    assert m.Buffers(2).Offset() == 1234 and m.Buffers(2).Size() == 99
    sg = m.Subgraphs(0)
    assert sg.Tensors(0).Type() == generated.TensorType.INT4
    assert sg.Tensors(0).Quantization().DetailsType() == generated.QuantizationDetails.BlockwiseQuantization
    op = sg.Operators(0)
    assert op.BuiltinOptionsType() == generated.BuiltinOptions.Conv2DOptions
    conv = generated.Conv2DOptions()
    conv.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    assert conv.Padding() == generated.Padding.VALID and conv.StrideW() == 2
    assert conv.FusedActivationFunction() == generated.ActivationFunctionType.RELU6
    op = sg.Operators(1)
    assert op.BuiltinOptions2Type() == generated.BuiltinOptions2.StableHLOCompositeOptions
    assert op.LargeCustomOptionsOffset() == 4096 and op.LargeCustomOptionsSize() == 8
    assert m.SignatureDefs(0).SignatureKey() == b"serving"
