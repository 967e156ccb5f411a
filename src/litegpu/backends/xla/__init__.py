"""XLA through JAX: the exact TFLite kernels traced into ``jax.jit`` programs, on the CPU and on the GPUs JAX sees
(CUDA, ROCm).

- ``engine``: the engine behind the interface of ``backends.engine`` (what the registry makes);
- ``backend``: the tracer, the model's weights and variables on the device (``XlaState``, with constant folding
  and donation) and one subgraph's programs (``XlaBackend``); the device helpers it runs on are engine-neutral
  (``backends.device_arrays``);
- ``generate``: the token loop run on the device; ``batched_decode``: decode steps of many sequences at once;
- ``layer_scan``: an LLM's repeated layers found in the graph and traced once;
- ``deviceless``: programs compiled for a GPU described in ``targets/`` without one;
- ``op_profile``: ``litegpu bench --profile``, each op timed alone as its own program.

Nothing is imported here: each module is imported where it is needed (JAX is loaded by the first of them).
"""
