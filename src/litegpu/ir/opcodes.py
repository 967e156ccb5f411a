"""Builtin op codes and the options table each builtin op uses."""

from __future__ import annotations

import functools

from ..format.schema import load_schema

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
    return dict(load_schema().enums["BuiltinOperator"].names)


@functools.lru_cache(maxsize=1)
def builtin_codes() -> dict[str, int]:
    return dict(load_schema().enums["BuiltinOperator"].values)


@functools.lru_cache(maxsize=1)
def _options_by_normalised_name() -> dict[str, str]:
    schema = load_schema()
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
    schema = load_schema()
    return "BuiltinOptions" if table_name in schema.unions["BuiltinOptions"].members else "BuiltinOptions2"
