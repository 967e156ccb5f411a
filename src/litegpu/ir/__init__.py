"""The model IR: what a model means, independent of its file layout."""

from .dtypes import numpy_dtype
from .load import called_subgraphs, entry_subgraphs, execution_order, read_model
from .model import Buffer, Metadata, Model, Operator, Options, Quantization, Signature, SignatureTensor, Subgraph, Tensor

__all__ = [
    "Buffer", "Metadata", "Model", "Operator", "Options", "Quantization", "Signature", "SignatureTensor",
    "Subgraph", "Tensor", "called_subgraphs", "entry_subgraphs", "execution_order", "numpy_dtype", "read_model",
]
