"""genmesh-bench gateway --mode tracing, run small: real gateways (tracing off, on with a collector,
on with the collector down, off again as the control) on the fake upstream, interleaved; the collector really got
spans, every request was answered, and each configuration has its ratio to tracing off and the
gateway's CPU per request. Figures
are the benchmark's business (make bench-gateway), not this test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.servers import ROOT


def test_the_tracing_benchmark_measures_three_configurations(tmp_path: Path) -> None:
    out = tmp_path / "tracing.json"
    argv = [sys.executable, "-m", "genmesh.bench.cli", "gateway", "--mode", "tracing", "--passes", "1"]
    argv += ["--requests", "600", "--clients", "8", "--log-dir", str(tmp_path / "logs"), "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    configs = doc["configs"]
    assert set(configs) == {"off", "on_collector_up", "on_collector_down", "off_control"}
    assert all(c["errors"] == 0 and c["req_per_s"] > 0 for c in configs.values())
    assert configs["on_collector_up"]["exports_received"] > 0
    assert configs["on_collector_down"]["throughput_vs_off"] > 0
    assert "added_latency_ms" in configs["on_collector_up"]
    assert all(c["gateway_cpu_ms_per_request"] > 0 for c in configs.values())  # the gateway did work
    assert configs["on_collector_up"]["cpu_vs_off"] > 0
    assert configs["off_control"]["throughput_vs_off"] > 0  # the A/A control
    assert configs["on_collector_up"]["exporter_cpu_ms_per_request"] > 0  # its span exporter made the spans
    assert configs["off"]["exporter_cpu_ms_per_request"] == 0  # no exporter when tracing is off
    assert [len(r) for r in doc["rounds"].values()] == [1, 1, 1, 1]
