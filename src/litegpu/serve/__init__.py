"""``litegpu serve``: every model behind the protocols servers speak (``pip install "litegpu[serve]"``).

Tensor models (``.tflite``, ``.circle``) answer the Open Inference Protocol v2 (KServe's and Triton's REST
API, JSON and binary tensors), with concurrent requests gathered into batched calls where that pays
(``batcher``); LLMs (``.litertlm`` bundles, litert-torch exports with a tokenizer) answer the OpenAI API,
streamed, their sequences decoded together where ``runtime.continuous`` is present (``generator``).  The same
application runs under uvicorn (``app.run``) or as Ray Serve replicas (``ray_deployment``).

This layer sits between ``runtime`` (which it uses) and ``cli`` (``litegpu serve``).
"""

from .app import ServerThread, Service, create_app, run
from .config import Limits, ModelSpec, ServeConfig, api_key_from, model_specs

__all__ = ["Limits", "ModelSpec", "ServeConfig", "ServerThread", "Service", "api_key_from", "create_app",
           "model_specs", "run"]
