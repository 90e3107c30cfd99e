"""An engine pinned to one CPU serves, on every CPU: where OpenVINO's one-thread bf16 compile crashes
with AMX (Sapphire and Emerald Rapids) the engine turns AMX off in its core (bf16 kept) and says so
in one log line; elsewhere (Zen 4, a CPU without bf16) it changes nothing and says nothing. The
decision is the one the guard's own rule gives for this machine, so the test holds on both kinds
of CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import psutil

from genmesh.engine.models.amx_guard import crash_prone, this_host
from support.servers import GENMESH_ENGINE_ONLY, start_engine

pytestmark = GENMESH_ENGINE_ONLY

CHANGED = "AMX turned off in the engine core"


def test_an_engine_pinned_to_one_cpu_serves_and_says_what_it_changed(tmp_path: Path) -> None:
    one = frozenset({min(os.sched_getaffinity(0))})
    host = this_host()
    # this CPU's verdict at one thread
    expected = crash_prone(1, host.amx, host.default_precision(), host.inherited_isa)
    engine = start_engine(tmp_path, cpus=one)
    try:
        family = [psutil.Process(engine.proc.pid), *psutil.Process(engine.proc.pid).children(recursive=True)]
        assert {frozenset(p.cpu_affinity() or []) for p in family} == {one}  # the core runs on the one CPU too
        body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
        r = httpx.post(engine.url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
        assert r.json()["usage"]["completion_tokens"] >= 1
    finally:
        engine.stop()
    records = [json.loads(x) for x in engine.log_path.read_text().splitlines() if x.startswith("{")]
    notes = [r["message"] for r in records if CHANGED in r["message"]]
    if expected:
        assert len(notes) == 1, notes
        assert "CPU affinity (1 CPU)" in notes[0]
        assert "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16" in notes[0]
        assert "openvinotoolkit/openvino#33300" in notes[0]
    else:
        assert notes == []
