"""Benchmark, timing and matrix results in the Prometheus exposition format.

    m = Metrics(labels=("model", "precision", "target", "gpu"))   # the variant's labels
    m.record({"model": "resnet", "precision": "fp16", "target": "sm89"},
             {"latency_p50_ms": 0.41, "latency_p99_ms": 0.52, "throughput_items_per_s": 9100,
              "engine_size_bytes": 5.1e6, "build_seconds": 12.3, "max_abs_error": 3e-3})
    m.write("run.prom")                 # node_exporter's textfile collector reads this
    server = m.serve(9464)              # optional /metrics on that port during a long run
    ...; server.shutdown()

    m.record_capture(capture_result, {"model": "resnet", "precision": "fp16"})  # timing-capture

One gauge per value name (`workbench_<name>`, help text from METRICS for the known ones), the
variant as labels (a label a record leaves out is ""). Built on prometheus_client's own
CollectorRegistry, generate_latest and start_http_server (the `deploy` extra), so the output is
what Prometheus and Grafana expect; nothing here is a home-made exposition writer.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from workbench.core.errors import WorkbenchError

PREFIX = "workbench_"
DEFAULT_LABELS = ("model", "variant", "precision", "target", "gpu", "backend")
# value name -> help text (any other numeric value is exported too, with a generic help)
METRICS: Dict[str, str] = {
    "latency_p50_ms": "engine latency, median over timed iterations (CUDA events), ms",
    "latency_p90_ms": "engine latency, 90th percentile, ms",
    "latency_p99_ms": "engine latency, 99th percentile, ms",
    "latency_mean_ms": "engine latency, mean, ms",
    "throughput_items_per_s": "items per second at the variant's batch size",
    "engine_size_bytes": "serialized engine size, bytes",
    "build_seconds": "TensorRT build time, seconds",
    "max_abs_error": "largest absolute output difference from the onnxruntime FP32 reference",
    "mean_abs_error": "mean absolute output difference from the onnxruntime FP32 reference",
    "cache_hit": "1 when the engine came from the engine cache",
    "ok": "1 when the variant built (and ran) without error",
}
_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise WorkbenchError("metrics need prometheus_client", field="metrics",
                             hint="pip install 'trt-workbench[deploy]'") from None
    return prometheus_client


def metric_name(value_name: str) -> str:
    """`latency_p50_ms` -> `workbench_latency_p50_ms` (characters Prometheus refuses become _)."""
    name = _NAME.sub("_", str(value_name)).strip("_") or "value"
    return name if name.startswith(PREFIX) else PREFIX + name


class Metrics:
    """A CollectorRegistry of gauges labelled by variant; thread-safe (a matrix records from
    its result callbacks while the HTTP endpoint is scraped)."""

    def __init__(self, labels: Sequence[str] = DEFAULT_LABELS) -> None:
        pc = _client()
        self._pc = pc
        self.registry = pc.CollectorRegistry()
        self.labels = tuple(_NAME.sub("_", str(lab)) for lab in labels)
        self._gauges: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def record(self, labels: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        """Set the gauges of one variant: each numeric (or bool) entry of `values` under
        `labels`; None, text and NaN-free non-numbers are skipped. Unknown label names raise."""
        extra = sorted(set(labels) - set(self.labels))
        if extra:
            raise WorkbenchError(f"label '{extra[0]}' is not one of this registry's labels",
                                 field="labels", hint="create Metrics(labels=(...)) with it: "
                                 + ", ".join(self.labels))
        label_values = [("" if labels.get(k) is None else str(labels.get(k)))
                        for k in self.labels]
        with self._lock:
            for key, value in values.items():
                if isinstance(value, bool):
                    value = float(value)
                if not isinstance(value, (int, float)):
                    continue
                name = metric_name(key)
                gauge = self._gauges.get(name)
                if gauge is None:
                    gauge = self._pc.Gauge(name, METRICS.get(str(key), f"{key} (trt-workbench)"),
                                           self.labels, registry=self.registry)
                    self._gauges[name] = gauge
                gauge.labels(*label_values).set(float(value))

    def record_capture(self, capture: Any, labels: Mapping[str, Any]) -> None:
        """A timing capture's latency percentiles and its per-batch throughput (as one more
        label set each, `variant` = "batch<B>" when the registry has that label)."""
        lat = getattr(capture, "latency", None) or {}
        self.record(labels, {f"latency_{k}": v for k, v in lat.items()
                             if k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")})
        for row in getattr(capture, "throughput", None) or []:
            lab = dict(labels)
            if "variant" in self.labels:
                lab["variant"] = f"{lab.get('variant') or ''}batch{row.get('batch')}"
            self.record(lab, {"throughput_items_per_s": row.get("items_per_s"),
                              "latency_p50_ms": row.get("p50_ms")})

    def record_all(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows that carry labels and values together (e.g. a matrix's result table): the keys
        that are labels label, the rest are values."""
        for row in rows:
            self.record({k: v for k, v in row.items() if k in self.labels},
                        {k: v for k, v in row.items() if k not in self.labels})

    def text(self) -> str:
        """The exposition text (what /metrics serves)."""
        return self._pc.generate_latest(self.registry).decode("utf-8")

    def write(self, path: Any) -> Path:
        """Write the exposition text to `path` atomically (for node_exporter's textfile
        collector, or a CI artifact)."""
        from workbench.core.fsutil import atomic_write_text

        out = Path(path)
        atomic_write_text(out, self.text())
        return out

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve /metrics on `addr`:`port` from a daemon thread while a long run goes on;
        returns the server (call `.shutdown()` to stop it). Port 0 picks a free port
        (`server.server_port`)."""
        try:
            started = self._pc.start_http_server(int(port), addr=addr,
                                                 registry=self.registry)
        except OSError as e:
            raise WorkbenchError(f"cannot serve metrics on {addr}:{port}: {e.strerror or e}",
                                 field="metrics-port", hint="choose a free port") from None
        if not isinstance(started, tuple):  # (prometheus_client < 0.20 returned nothing)
            raise WorkbenchError("this prometheus_client does not hand back its server",
                                 field="metrics-port", hint="pip install 'prometheus_client>=0.20'")
        return started[0]


def write_metrics(path: Any, rows: Iterable[Mapping[str, Any]],
                  labels: Optional[Sequence[str]] = None) -> Path:
    """One call: `rows` (labels and values together, see Metrics.record_all) to `path`."""
    m = Metrics(labels or DEFAULT_LABELS)
    m.record_all(rows)
    return m.write(path)
