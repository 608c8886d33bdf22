"""Prometheus metrics (workbench.fleet.metrics): the written file and a real scrape of the /metrics
endpoint, both parsed with prometheus_client's own parser."""
from __future__ import annotations

import urllib.request

import pytest

from workbench.core.errors import WorkbenchError
from workbench.fleet.metrics import Metrics, metric_name, write_metrics

parser = pytest.importorskip("prometheus_client.parser")

ROWS = [
    {"model": "resnet_tiny", "precision": "fp32", "target": "sm89", "latency_p50_ms": 0.41,
     "latency_p99_ms": 0.57, "engine_size_bytes": 492428, "build_seconds": 1.25, "ok": True,
     "status": "built"},
    {"model": "resnet_tiny", "precision": "fp16", "target": "sm120", "latency_p50_ms": 0.22,
     "max_abs_error": 3.1e-3, "engine_size_bytes": 260000, "ok": False},
]


def _samples(text):
    """{(metric, frozenset(labels)): value} and {metric: (type, help)} from exposition text."""
    values, meta = {}, {}
    for fam in parser.text_string_to_metric_families(text):
        meta[fam.name] = (fam.type, fam.documentation)
        for s in fam.samples:
            values[(s.name, frozenset(s.labels.items()))] = s.value
    return values, meta


def _key(name, **labels):
    full = {"model": "", "variant": "", "precision": "", "target": "", "gpu": "",
            "backend": ""}
    full.update(labels)
    return (name, frozenset(full.items()))


def test_written_file_parses_with_the_variant_as_labels(tmp_path):
    out = write_metrics(tmp_path / "run.prom", ROWS)
    values, meta = _samples(out.read_text())
    fp32 = dict(model="resnet_tiny", precision="fp32", target="sm89")
    fp16 = dict(model="resnet_tiny", precision="fp16", target="sm120")
    assert values[_key("workbench_latency_p50_ms", **fp32)] == 0.41
    assert values[_key("workbench_latency_p99_ms", **fp32)] == 0.57
    assert values[_key("workbench_engine_size_bytes", **fp32)] == 492428
    assert values[_key("workbench_ok", **fp32)] == 1.0
    assert values[_key("workbench_ok", **fp16)] == 0.0
    assert values[_key("workbench_max_abs_error", **fp16)] == pytest.approx(3.1e-3)
    assert _key("workbench_max_abs_error", **fp32) not in values  # not measured: no sample
    assert not any(k[0].endswith("status") for k in values)  # text is not a metric
    assert meta["workbench_latency_p50_ms"][0] == "gauge"
    assert "median" in meta["workbench_latency_p50_ms"][1]


def test_timing_capture_results_become_latency_and_throughput():
    class Capture:  # the fields of workbench.measure.capture.CaptureResult it reads
        latency = {"p50_ms": 1.5, "p90_ms": 1.7, "p99_ms": 2.0, "n": 100, "mean_ms": 1.55}
        throughput = [{"batch": 1, "items_per_s": 650.0, "p50_ms": 1.5},
                      {"batch": 8, "items_per_s": 4100.0, "p50_ms": 1.95}]

    m = Metrics()
    m.record_capture(Capture(), {"model": "r50", "precision": "fp16", "gpu": "GPU-9c73"})
    values, _ = _samples(m.text())
    base = dict(model="r50", precision="fp16", gpu="GPU-9c73")
    assert values[_key("workbench_latency_p99_ms", **base)] == 2.0
    assert values[_key("workbench_throughput_items_per_s", variant="batch8", **base)] == 4100.0
    assert not any(k[0] == "workbench_latency_n" for k in values)


def test_live_endpoint_is_scraped_during_a_run():
    m = Metrics(labels=("variant",))
    server = m.serve(0)  # a free port on 127.0.0.1
    try:
        m.record({"variant": "fp16-sm89"}, {"build_seconds": 2.5})
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        values, _ = _samples(text)
        assert values[("workbench_build_seconds", frozenset({("variant", "fp16-sm89")}))] == 2.5
        m.record({"variant": "fp16-sm89"}, {"build_seconds": 3.0})  # updated in place
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert _samples(text)[0][("workbench_build_seconds",
                                  frozenset({("variant", "fp16-sm89")}))] == 3.0
        with pytest.raises(WorkbenchError, match="cannot serve metrics on 127.0.0.1"):
            Metrics().serve(server.server_port)  # the port is taken
    finally:
        server.shutdown()
        server.server_close()


def test_unknown_label_and_odd_names():
    m = Metrics(labels=("model",))
    with pytest.raises(WorkbenchError, match="label 'gpu' is not one of"):
        m.record({"gpu": "0"}, {"ok": 1})
    assert metric_name("p50 (ms)") == "workbench_p50__ms"
    assert metric_name("workbench_ok") == "workbench_ok"
