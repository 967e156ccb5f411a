"""The engines that run a model's partitions, one module each behind one interface (``engine.py``): the numpy
reference interpreter (``reference``, exact and slow), XLA (``xla``: ``jax.jit`` on CPU or GPU, exact integer
kernels), the official interpreter with XNNPACK (``litert``), OpenVINO (``openvino``) and IREE on Vulkan or Metal
GPUs (``iree``), named in one registry (``registry.py``) that no engine imports; with what they share below them:
graph walking (``graph``) and the compile cache (``cache``)."""

from .._lazy import lazy_names

# imported on first use: the graph walker loads the IR's classes, which a warm start does without
__all__ = ["GraphRunner", "ReferenceBackend"]
__getattr__, __dir__ = lazy_names(__name__, {"GraphRunner": ".graph", "ReferenceBackend": ".reference"}, __all__)
