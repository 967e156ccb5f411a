"""The same application as Ray Serve replicas (``pip install "litegpu[ray]"``): ``litegpu serve --ray ADDRESS``.

Each replica loads every model and serves the whole API (its own batcher, generator and metrics); Ray Serve's
proxy spreads requests over the replicas.  ``gpus_per_replica=1`` gives each replica a GPU of its own, so a user
who outgrows one machine adds nodes to the Ray cluster, not code.

    app = deployment(config, replicas=2)       # a bound Ray Serve application
    serve.run(app, route_prefix="/")
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from ..errors import InvalidArgumentError
from .config import ServeConfig


def _ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import serve
    except ImportError:
        raise InvalidArgumentError('--ray needs Ray Serve: pip install "litegpu[ray]"') from None
    return ray, serve


class Replica:
    """One Ray Serve replica: a ``Service`` of its own and the application over it."""

    def __init__(self, config: ServeConfig):
        from .app import Service

        self.service = Service(config)

    def __serve_build_asgi_app__(self) -> Any:
        from .app import create_app

        return create_app(self.service)

    def check_health(self) -> None:
        """Ray Serve restarts a replica whose models failed to load."""
        if self.service.failed:
            raise RuntimeError(self.service.failed)


def deployment(config: ServeConfig, *, replicas: int = 1, gpus_per_replica: float = 0.0) -> Any:
    """The bound Ray Serve application of ``config``'s models."""
    _, serve = _ray()
    if replicas < 1:
        raise InvalidArgumentError(f"replicas must be at least 1, got {replicas}")
    ingress = serve.ingress()(Replica)
    return serve.deployment(ingress, name="litegpu", num_replicas=replicas,
                            ray_actor_options={"num_gpus": gpus_per_replica},
                            max_ongoing_requests=max(config.max_batch, config.max_sequences) * 4).bind(config)


def start(config: ServeConfig, address: str, *, replicas: int = 1, gpus_per_replica: float = 0.0) -> Any:
    """Connect to (``local``: start) a Ray cluster, start Ray Serve's proxy on ``config.host:port`` and deploy;
    returns once the replicas are up (their models may still be loading: ``/v2/health/ready``)."""
    ray, serve = _ray()
    ray.init(address=None if address == "local" else address, ignore_reinit_error=True,
             include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": config.host, "port": config.port})
    return serve.run(deployment(config, replicas=replicas, gpus_per_replica=gpus_per_replica), name="litegpu",
                     route_prefix="/")


def run_on_ray(config: ServeConfig, address: str, *, replicas: int = 1, gpus_per_replica: float = 0.0) -> None:
    """``litegpu serve --ray``: deploy, then wait for SIGTERM / Ctrl-C and take the application down."""
    ray, serve = _ray()
    start(config, address, replicas=replicas, gpus_per_replica=gpus_per_replica)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()


__all__ = ["Replica", "deployment", "run_on_ray", "start"]
