"""The model IR: what a model means, independent of its file layout.

The names are imported on first use (PEP 562): a warm start that runs a cached model without reading it into the
IR (``runtime.warm_start``) does not pay for the IR's classes or the FlatBuffer decoder (10-20 ms of a start)."""

from .._lazy import lazy_names

# name -> the module of this package that defines it
_WHERE = {
    "numpy_dtype": ".dtypes",
    "called_subgraphs": ".load", "entry_subgraphs": ".load", "execution_order": ".load", "read_model": ".load",
    **{name: ".model" for name in ("Buffer", "Metadata", "Model", "Operator", "Options", "Quantization", "Signature",
                                   "SignatureTensor", "Subgraph", "Tensor")},
}

__all__ = [
    "Buffer", "Metadata", "Model", "Operator", "Options", "Quantization", "Signature", "SignatureTensor",
    "Subgraph", "Tensor", "called_subgraphs", "entry_subgraphs", "execution_order", "numpy_dtype", "read_model",
]


__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
