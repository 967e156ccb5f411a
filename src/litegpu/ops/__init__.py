"""Ops: one class per TFLite op with options, reference kernel, XLA lowering and support rules."""

from .registry import Op, OpContext, Target, builtin_ops, custom_ops, find, lookup, register

__all__ = ["Op", "OpContext", "Target", "builtin_ops", "custom_ops", "find", "lookup", "register"]
