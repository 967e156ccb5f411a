"""Builtin op codes and the options table each builtin op uses.

The IR knows every builtin op of both formats: TFLite's codes 0..209, and circle's own ops below
zero (INSTANCE_NORM -2 ... ATTENTION -9; the circle schema holds TFLite's ops too, so its enum is
the whole set).  Option tables that both schemas define take TFLite's fields (circle's lack a few
TFLite-only ones), so that a model means the same whichever format it was read from.
"""

from __future__ import annotations

import functools

from ..format.schema import Schema, load_circle_schema, load_schema

# Ops whose options table name does not follow from the op name.
_IRREGULAR_OPTIONS = {
    "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_PROD": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions", "REDUCE_MIN": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "L2_NORMALIZATION": "L2NormOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions", "CONV_3D": "Conv3DOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions", "LOCAL_RESPONSE_NORMALIZATION": "LocalResponseNormalizationOptions",
    "EMBEDDING_LOOKUP_SPARSE": "EmbeddingLookupSparseOptions", "SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions",
    "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "UNSORTED_SEGMENT_PROD": "UnsortedSegmentProdOptions", "UNSORTED_SEGMENT_MAX": "UnsortedSegmentMaxOptions",
    "UNSORTED_SEGMENT_MIN": "UnsortedSegmentMinOptions", "UNSORTED_SEGMENT_SUM": "UnsortedSegmentSumOptions",
    "STABLEHLO_COMPOSITE": "StableHLOCompositeOptions",
}


def _normalise(name: str) -> str:
    return name.replace("_", "").lower()


@functools.lru_cache(maxsize=1)
def builtin_names() -> dict[int, str]:
    """Every builtin op of either format, by code."""
    return dict(load_circle_schema().enums["BuiltinOperator"].names)


@functools.lru_cache(maxsize=1)
def builtin_codes() -> dict[str, int]:
    return dict(load_circle_schema().enums["BuiltinOperator"].values)


def circle_only_ops() -> dict[str, int]:
    """The builtin ops that only circle defines (negative codes), by name."""
    tflite = load_schema().enums["BuiltinOperator"].values
    return {name: code for name, code in builtin_codes().items() if name not in tflite}


@functools.lru_cache(maxsize=1)
def _options_by_normalised_name() -> dict[str, str]:
    schema = load_circle_schema()
    members = schema.unions["BuiltinOptions"].members + schema.unions["BuiltinOptions2"].members
    return {_normalise(m): m for m in members}


@functools.lru_cache(maxsize=None)
def options_table_for(op_name: str) -> str | None:
    """The options table a builtin op reads (None if it takes no options)."""
    if op_name in _IRREGULAR_OPTIONS:
        return _IRREGULAR_OPTIONS[op_name]
    return _options_by_normalised_name().get(_normalise(op_name) + "options")


@functools.lru_cache(maxsize=None)
def options_union_for(table_name: str) -> str:
    schema = load_circle_schema()
    return "BuiltinOptions" if table_name in schema.unions["BuiltinOptions"].members else "BuiltinOptions2"


def ir_table_schema(table_name: str) -> Schema:
    """The schema whose definition of a table the IR follows: TFLite's where it has the table."""
    return load_schema() if table_name in load_schema().tables else load_circle_schema()


@functools.lru_cache(maxsize=None)
def option_defaults(table_name: str) -> dict[str, object]:
    """The IR's options of an op made in code with no field given (vectors empty)."""
    return ir_table_schema(table_name).defaults(table_name)


@functools.lru_cache(maxsize=None)
def absent_options(table_name: str) -> dict[str, object]:
    """The IR's options of an op whose file leaves every field out: what the codec decodes for
    absent fields (None for a vector), so that a field one format lacks reads as if left out."""
    table = ir_table_schema(table_name).tables[table_name]
    return {f.name: None if f.is_vector else f.default for f in table.fields if not f.deprecated}
