"""Reading and writing .circle files: the same IR as .tflite, both layouts, conversions both ways.

Every file litegpu writes as .circle is parsed again by ONE's own generated bindings
(``circle-schema``), field by field against what our codec decoded, so our writer and reader cannot
agree on a mistake.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from litegpu.errors import FormatConversionError, ModelFormatError
from litegpu.format import CIRCLE, Encoder, decode_model, load_circle_schema
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes, write_extended, write_model

SCHEMA = load_circle_schema()
SHARED = ["mobilenet_v3_small_float32", "mobilenet_v3_small_int8", "transformer_encoder_float32",
          "two_signatures_float32", "mediapipe_face_detection_short_range"]
_CIRCLE_SPELLING = {("BatchMatMulOptions", "adj_x"): "adjointLhs", ("BatchMatMulOptions", "adj_y"): "adjointRhs"}


def circle_bytes(model, layout: str = "inline") -> bytes:
    if layout == "inline":
        return to_bytes(model, CIRCLE)
    out = io.BytesIO()
    write_extended(model, out, fmt=CIRCLE)
    return out.getvalue()


def rms_norm_model() -> ModelBuilder:
    b = ModelBuilder()
    x = b.input("x", (1, 4, 8))
    gamma = b.constant("gamma", np.linspace(0.5, 1.5, 8, dtype=np.float32))
    y = b.tensor("y", (1, 4, 8))
    b.op("RMS_NORM", [x, gamma], [y], epsilon=2.0 ** -20)  # float32-exact, so a read-back compares equal
    b.output(y)
    return b


# --- ONE's bindings read what we wrote -------------------------------------------------------------

def _lower_camel(table: str, name: str) -> str:
    if (table, name) in _CIRCLE_SPELLING:
        return _CIRCLE_SPELLING[(table, name)]
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def assert_same_as_circle_schema(table: str, ours: dict | None, theirs, path: str = "Model") -> None:
    """Our decoded table against circle-schema's object API, every field."""
    if ours is None or theirs is None:
        assert ours is None and theirs is None, f"{path}: ours {ours!r}, circle-schema {theirs!r}"
        return
    for f in SCHEMA.tables[table].fields:
        if f.deprecated:
            continue
        where, attr = f"{path}.{f.name}", _lower_camel(table, f.name)
        value, kind = getattr(theirs, attr), SCHEMA.kind(f.type)
        if kind == "union":
            member = ours[f.name + "_type"]
            code = SCHEMA.unions[f.type].code(member) if member else 0
            assert getattr(theirs, attr + "Type") == code, f"{where}_type"
            if member:
                assert_same_as_circle_schema(member, ours[f.name], value, where)
        elif f.is_vector and kind == "table":
            assert len(ours[f.name] or []) == len(value or []), where
            for i, (a, b) in enumerate(zip(ours[f.name] or [], value or [])):
                assert_same_as_circle_schema(f.type, a, b, f"{where}[{i}]")
        elif f.is_vector and kind == "string":
            assert [s.encode() for s in ours[f.name] or []] == list(value or []), where
        elif f.is_vector:
            mine = np.asarray(ours[f.name] if ours[f.name] is not None else [])
            assert np.array_equal(mine, np.asarray(value if value is not None else [])), where
        elif kind == "string":
            assert (ours[f.name].encode() if ours[f.name] is not None else None) == value, where
        elif kind == "table":
            assert_same_as_circle_schema(f.type, ours[f.name], value, where)
        elif kind == "enum":
            mine = ours[f.name]
            assert (SCHEMA.enums[f.type].values[mine] if isinstance(mine, str) else mine) == value, where
        else:
            assert ours[f.name] == value, where


def check_with_circle_schema(data: bytes) -> None:
    model_module = pytest.importorskip("circle_schema.v0_10.circle.Model", reason="needs circle-schema")
    theirs = model_module.ModelT.InitFromPackedBuf(bytearray(data), 0)
    assert_same_as_circle_schema("Model", decode_model(data).root, theirs)
    assert model_module.Model.ModelBufferHasIdentifier(data, 0)


# --- reading ---------------------------------------------------------------------------------------

def test_identifier_picks_the_schema():
    model = rms_norm_model().build()
    again = read_model(circle_bytes(model))
    assert again == model and again.file_format == "circle"
    assert again.main.operators[0].opcode_name == "RMS_NORM" and again.main.operators[0].builtin_code == -6
    assert again.main.operators[0].options.epsilon == 2.0 ** -20


def test_unknown_identifier_names_both_formats():
    data = bytearray(to_bytes(rms_norm_model().build(), CIRCLE))
    data[4:8] = b"XYZ0"
    with pytest.raises(ModelFormatError, match=r"b'XYZ0', expected b'TFL3' \(.tflite\) or b'CIR0' \(.circle\)"):
        read_model(bytes(data))


def _raw_circle(tensor_extra: dict | None = None, opcode: dict | None = None, tflite: bool = False) -> bytes:
    """A one-op circle (or TFLite) file made straight from tables, to hold what our writer never writes."""
    tensor = {"shape": np.asarray([4], np.int32), "type": "FLOAT32", "name": "x", **(tensor_extra or {})}
    root = {
        "version": 0, "buffers": [{}],
        "operator_codes": [opcode or {"deprecated_builtin_code": 14, "builtin_code": "LOGISTIC"}],
        "subgraphs": [{"tensors": [tensor, {**tensor, "name": "y"}], "inputs": np.asarray([0], np.int32),
                       "outputs": np.asarray([1], np.int32),
                       "operators": [{"opcode_index": 0, "inputs": np.asarray([0], np.int32),
                                      "outputs": np.asarray([1], np.int32)}]}],
    }
    if tflite:
        from litegpu.format import load_schema

        return bytes(Encoder(load_schema()).finish("Model", root, b"TFL3"))
    return bytes(Encoder(SCHEMA).finish("Model", root, b"CIR0"))


def test_negative_codes_in_the_byte_field_alone_read_as_one_reads_them():
    # Older circle writers leave the wide field 0 (ADD); ONE reads the byte field then.
    data = _raw_circle(opcode={"deprecated_builtin_code": -2})
    assert read_model(data).main.operators[0].opcode_name == "INSTANCE_NORM"


def test_compressed_weights_are_refused_naming_the_tensor():
    with pytest.raises(ModelFormatError, match=r"<bytes>: subgraph 0 tensor 0 \('x'\) holds HUFFMAN-compressed"):
        read_model(_raw_circle({"compression_type": "HUFFMAN"}))


def test_tflite_codes_past_the_tflite_enum_stay_unknown_there():
    """A TFLite file cannot name circle's ops: code -6 there is an unknown op, not RMS_NORM."""
    data = _raw_circle(opcode={"deprecated_builtin_code": -6, "builtin_code": -6}, tflite=True)
    assert read_model(data).main.operators[0].opcode_name == "UNKNOWN_BUILTIN_-6"


# --- writing and converting ------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["inline", "extended"])
def test_circle_only_model_round_trips_and_circle_schema_reads_it(layout):
    model = rms_norm_model().build()
    data = circle_bytes(model, layout)
    assert read_model(data) == model
    check_with_circle_schema(data)


def test_circle_only_op_cannot_be_written_as_tflite(tmp_path):
    path = tmp_path / "m.tflite"
    with pytest.raises(FormatConversionError, match=r"op RMS_NORM \(code -6\) has no place in a .tflite file"):
        write_model(rms_norm_model().build(), path)
    assert list(tmp_path.iterdir()) == []  # nothing left behind, not even a temp file


def test_tflite_only_types_cannot_be_written_as_circle(tmp_path):
    b = ModelBuilder()
    w = b.constant("w", np.array([[1, -2], [0, 1]], np.int8), "int2", quantization=quantization(0.5))
    y = b.tensor("y", (2, 2))
    b.op("DEQUANTIZE", [w], [y])
    b.output(y)
    with pytest.raises(FormatConversionError, match=r"tensor 0 \('w'\): tensor type int2 has no place in a .circle"):
        write_model(b.build(), tmp_path / "m.circle")


def test_blockwise_details_move_to_circles_code():
    b = ModelBuilder()
    scales = b.constant("scales", np.ones((4, 1), np.float16))
    from litegpu.ir.model import Options, Quantization
    details = Options({"type": "BlockwiseQuantization", "scales": scales, "zero_points": -1, "block_size": 32})
    w = b.constant("w", np.zeros((4, 32), np.int8), "int4",
                   quantization=Quantization(details=details))
    x = b.input("x", (1, 32))
    y = b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, w, -1], [y], quant_spec=None)  # absent, as converters leave it
    b.output(y)
    model = read_model(to_bytes(b.build()))
    data = circle_bytes(model)
    assert decode_model(data).root["subgraphs"][0]["tensors"][1]["quantization"]["details_type"] == \
        "BlockwiseQuantization"
    assert read_model(data) == model
    check_with_circle_schema(data)


@pytest.mark.parametrize("name", SHARED)
@pytest.mark.parametrize("layout", ["inline", "extended"])
def test_tflite_to_circle_to_tflite_keeps_the_model(shared_models, name, layout):
    original = read_model(shared_models / f"{name}.tflite")
    data = circle_bytes(original, layout)
    as_circle = read_model(data)
    assert as_circle == original and as_circle.file_format == "circle"
    check_with_circle_schema(data)
    back = read_model(to_bytes(as_circle))
    assert back == original and back.file_format == "tflite"


def test_writer_follows_the_file_name_then_the_model(tmp_path):
    model = read_model(circle_bytes(rms_norm_model().build()))
    write_model(model, tmp_path / "a.bin")  # no telling suffix: the format it was read from
    assert decode_model(tmp_path / "a.bin").file_format is CIRCLE
    plain = ModelBuilder()
    x = plain.input("x", (2,))
    y = plain.tensor("y", (2,))
    plain.op("RELU", [x], [y])
    plain.output(y)
    write_model(plain.build(), tmp_path / "b.circle")
    assert read_model(tmp_path / "b.circle").file_format == "circle"
    write_model(read_model(tmp_path / "b.circle"), tmp_path / "c.tflite")
    assert read_model(tmp_path / "c.tflite").file_format == "tflite"
    write_model(plain.build(), tmp_path / "d.bin", file_format="circle")
    assert read_model(tmp_path / "d.bin").file_format == "circle"


def test_conversion_writes_the_target_formats_schema_version():
    """The official interpreter refuses TFLite files whose version is not 3; circle files hold 0."""
    model = read_model(circle_bytes(rms_norm_model().build()))
    assert model.version == 0
    plain = ModelBuilder()
    x = plain.input("x", (2,))
    y = plain.tensor("y", (2,))
    plain.op("RELU", [x], [y])
    plain.output(y)
    as_circle = read_model(to_bytes(plain.build(), CIRCLE))
    assert as_circle.version == 0 and decode_model(to_bytes(as_circle)).root["version"] == 3


def _ggml_fc_model(raw: np.ndarray):
    """FULLY_CONNECTED with a [4, 64] GGML_Q4_0 weight: 2 blocks of 18 bytes per row."""
    b = ModelBuilder()
    x = b.input("x", (1, 64))
    w = b.tensor("w", (4, 64), "ggml_q4_0", buffer=b.add_buffer(raw), raw=raw)
    y = b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, w, -1], [y], quant_spec=None)
    b.output(y)
    return b.build()


def test_ggml_weights_are_read_written_and_run():
    raw = np.random.default_rng(0).integers(0, 256, 4 * 2 * 18).astype(np.uint8)
    raw.reshape(4, 2, 18)[..., 1] = 0x30  # float16 scales of modest size (high byte): no inf / NaN from random bits
    model = _ggml_fc_model(raw)
    data = circle_bytes(model)
    again = read_model(data)
    assert again == model and again.main.tensors[1].dtype == "ggml_q4_0"
    assert again.main.tensors[1].data.tobytes() == raw.tobytes()
    check_with_circle_schema(data)
    with pytest.raises(FormatConversionError, match="tensor type ggml_q4_0 has no place in a .tflite file"):
        to_bytes(again)
    from litegpu.backends import ReferenceBackend

    # dequantized inside FULLY_CONNECTED (tests/ops/test_circle_weights.py checks the values)
    out = ReferenceBackend(again).run([np.ones((1, 64), np.float32)])[0]
    assert out.shape == (1, 4) and np.isfinite(out).all()


def test_ggml_weight_of_the_wrong_size_names_the_tensor():
    data = circle_bytes(_ggml_fc_model(np.zeros(4 * 2 * 18 - 1, np.uint8)))
    with pytest.raises(ModelFormatError, match=r"tensor 1 \('w'\) of shape \[4, 64\] and type ggml_q4_0 needs 144 bytes"):
        read_model(data)
