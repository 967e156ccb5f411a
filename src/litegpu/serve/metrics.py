"""The server's Prometheus metrics (``GET /metrics``, Prometheus' text format), in a registry of its own so that
several servers in one process (tests, Ray replicas) count separately."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """Requests and errors per protocol, queue time and batch sizes per model, and for LLMs tokens, tokens/s,
    time to first token and the sequences running and waiting."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("litegpu_requests", "HTTP requests answered", ["protocol", "code"], registry=r)
        self.errors = Counter("litegpu_request_errors", "HTTP requests answered with an error (4xx, 5xx)",
                              ["protocol", "code"], registry=r)
        self.latency = Histogram("litegpu_request_duration_seconds", "time from request to the end of the answer",
                                 ["protocol"], buckets=_LATENCY, registry=r)
        self.queue_time = Histogram("litegpu_queue_time_seconds", "time a request waited for its batch to start",
                                    ["model"], buckets=_LATENCY, registry=r)
        self.batch_size = Histogram("litegpu_batch_size", "requests run together in one call", ["model"],
                                    buckets=_BATCH_SIZES, registry=r)
        self.inference_time = Histogram("litegpu_inference_seconds", "time of one (batched) model call", ["model"],
                                        buckets=_LATENCY, registry=r)
        self.prompt_tokens = Counter("litegpu_prompt_tokens", "prompt tokens of LLM requests", ["model"], registry=r)
        self.generated_tokens = Counter("litegpu_generated_tokens", "tokens generated", ["model"], registry=r)
        self.first_token = Histogram("litegpu_time_to_first_token_seconds", "time from submit to the first token",
                                     ["model"], buckets=_LATENCY, registry=r)
        self.tokens_per_second = Histogram("litegpu_tokens_per_second", "a request's tokens per second after its "
                                           "first token", ["model"],
                                           buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000), registry=r)
        self.ready = Gauge("litegpu_ready", "1 once every model is loaded, 0 while loading or shutting down",
                           registry=r)
        self._generators: dict[str, Callable[[], dict[str, Any]]] = {}
        r.register(_GeneratorCollector(self._generators))

    def llm_gauges(self, model: str, stats: Callable[[], dict[str, Any]]) -> None:
        """``litegpu_llm_{active,waiting}_sequences{model=...}``, read from the generator's ``stats()`` at each
        scrape."""
        self._generators[model] = stats

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _GeneratorCollector:
    def __init__(self, generators: dict[str, Callable[[], dict[str, Any]]]):
        self.generators = generators

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        for key, help_text in (("active", "LLM sequences being decoded"), ("waiting", "LLM sequences waiting")):
            family = GaugeMetricFamily(f"litegpu_llm_{key}_sequences", help_text, labels=["model"])
            for model, stats in self.generators.items():
                family.add_metric([model], _stat(stats(), key))
            yield family


def _stat(stats: dict[str, Any], word: str) -> float:
    """The generator's count whose key holds ``word`` ("active", "active_sequences", ...), 0 without one."""
    return float(next((v for k, v in stats.items() if word in k and isinstance(v, (int, float))), 0))


__all__ = ["Metrics"]
