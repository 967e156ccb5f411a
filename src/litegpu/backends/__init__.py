"""Backends execute ops: ``reference`` (numpy, exact) and ``xla`` (jax.jit on CPU or GPU)."""

from .graph import GraphRunner
from .reference import ReferenceBackend

__all__ = ["GraphRunner", "ReferenceBackend"]
