"""The one result type of a run: what was sent, vLLM's metrics (keys as in its ``--save-result``
files, so one table and chart reads both: TTFT to the first text, TPOT (E2E - TTFT) / (tokens - 1),
ITL every gap, goodput the req/s that met every SLO), the CPU steal and the per-request samples."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

Result = dict[str, Any]
HIGH_STEAL_PERCENT = 10.0
SLO_KEYS = ("ttft", "tpot", "e2el")
STATS: dict[str, Callable[[list[float]], Any]] = {"mean": np.mean, "median": np.median, "std": np.std}
STATS |= {"p90": lambda a: np.percentile(a, 90), "p99": lambda a: np.percentile(a, 99)}


@dataclass
class RequestOutput:
    success: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float = 0.0
    error: str | None = None
    queue_wait_s: float | None = None  # the genmesh gateway's x-queue-wait-ms (its wait for a slot), when sent

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (e2e - TTFT) / (tokens - 1)."""
        if not self.success or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def usage(self, usage: Any) -> bool:
        """Take the token counts from an OpenAI ``usage`` object; whether there was one."""
        if isinstance(usage, dict) and "completion_tokens" in usage:
            self.output_tokens = int(usage["completion_tokens"])
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            return True
        return False


@dataclass(frozen=True)
class Load:
    duration_s: float
    outputs: list[RequestOutput]
    health_s: list[float] = field(default_factory=list)
    health_failures: int = 0


# What each measured process tree spends in a run, for the report's "CPU ms per output token" and "RSS" of
# every process (the engine's API process and its core process apart).
BENCH_CLIENT = "bench client"


@dataclass(frozen=True)
class TreeSample:
    name: str
    cpu_s: float  # user + system, the root and all its descendants
    rss_mib: float  # summed over the tree (pages two processes share count twice)


def tree_name(proc: psutil.Process) -> str:
    """``python -m genmesh.engine`` -> ``engine``; the load generator itself -> ``bench client``;
    anything else by its executable's name (``redis-server``, ``vllm``, ``llama-server``)."""
    if proc.pid == os.getpid():
        return BENCH_CLIENT
    with contextlib.suppress(psutil.Error):
        argv = proc.cmdline()
        if "multiprocessing.spawn" in " ".join(argv[:4]) and (up := proc.parent()):  # a server's worker
            return f"{tree_name(up)} core"
        if "-m" in argv[:-1] and os.path.basename(argv[0]).startswith("python"):  # not llama-server's -m MODEL
            module = argv[argv.index("-m") + 1]
            return module.removeprefix("genmesh.")
        return os.path.basename(argv[0]) if argv else proc.name()
    return str(proc.pid)


def sample(roots: Sequence[int]) -> dict[int, TreeSample]:
    """Each root's tree now (a root that is gone is left out). A root below another (the servers the load
    generator started), and a server's spawned worker (the engine's core), is a tree of its own."""
    trees: dict[int, list[psutil.Process]] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(root)
            trees[root] = [top, *top.children(recursive=True)]
            trees |= {c.pid: [c] for c in top.children() if root != os.getpid() and tree_name(c).endswith(" core")}
    out: dict[int, TreeSample] = {}
    for root, tree in trees.items():
        inner, cpu, rss = {p.pid for r in tree[1:] if r.pid in trees for p in trees[r.pid]}, 0.0, 0.0
        for proc in (p for p in tree if p.pid not in inner):
            with contextlib.suppress(psutil.Error):
                cpu, rss = cpu + sum(proc.cpu_times()[:2]), rss + proc.memory_info().rss / 2**20
        out[root] = TreeSample(tree_name(tree[0]), cpu, rss)
    return out


def usage(before: dict[int, TreeSample], after: dict[int, TreeSample]) -> list[dict[str, float | str]]:
    """Per tree: the CPU seconds spent between the samples and the RSS at the second."""
    return [
        {"process": a.name, "cpu_s": a.cpu_s - before[pid].cpu_s, "rss_mib": a.rss_mib}
        for pid, a in after.items()
        if pid in before
    ]


class StealMeter:
    """``with StealMeter(pids) as m``: shares of the machine's CPU time in the interval: steal (given to other
    guests), busy, and other (busy, not by the trees rooted at ``pids``). Only like figures compare."""

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self._pids = tuple(pids) or (os.getpid(),)
        self.steal_percent: float | None = None
        self.busy_percent: float | None = None
        self.other_percent: float | None = None
        self.processes: list[dict[str, float | str]] = []  # each tree's CPU seconds and RSS (sample)

    def __enter__(self) -> StealMeter:
        self._trees, self._cpu = sample(self._pids), psutil.cpu_times()
        return self

    def __exit__(self, *exc: object) -> None:
        cpu = psutil.cpu_times()
        self.processes = usage(self._trees, sample(self._pids))
        busy = [t.user + t.nice + t.system + t.irq + t.softirq for t in (self._cpu, cpu)]  # guest time is in user
        span = busy[1] - busy[0] + sum(getattr(cpu, f) - getattr(self._cpu, f) for f in ("idle", "iowait", "steal"))
        if span > 0:
            own_s = sum(float(p["cpu_s"]) for p in self.processes)
            self.steal_percent = 100.0 * (cpu.steal - self._cpu.steal) / span
            self.busy_percent = 100.0 * (busy[1] - busy[0]) / span
            self.other_percent = max(0.0, self.busy_percent - 100.0 * own_s / span)


def percentile(samples: Iterable[float | None], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation; 50: the median) of the samples that are not ``None``."""
    present = [s for s in samples if s is not None]
    return float(np.percentile(np.asarray(present, dtype=np.float64), q)) if present else None


def parse_goodput(items: Sequence[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> ``{"ttft": 500.0, "tpot": 50.0}`` (milliseconds)."""
    slos: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or key not in SLO_KEYS:
            raise ValueError(f"goodput SLO {item!r}: expected KEY:MS with KEY one of {', '.join(SLO_KEYS)}")
        slos[key] = float(value)
        if slos[key] <= 0:
            raise ValueError(f"goodput SLO {item!r}: milliseconds must be positive")
    return slos


def make_result(
    label: str,
    load: Load,
    meter: StealMeter | None,
    *,
    completed: int | None = None,
    output_tokens: int | None = None,
    slos: Mapping[str, float] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Result:
    """One run's result; ``completed`` and ``output_tokens`` where requests were not timed (in-process)."""
    ok = [o for o in load.outputs if o.success]
    done = len(ok) if completed is None else completed
    tokens_in = sum(o.prompt_tokens for o in ok)
    tokens_out = sum(o.output_tokens for o in ok) if output_tokens is None else output_tokens

    def per_s(x: float) -> float:
        return x / load.duration_s if load.duration_s > 0 else 0.0

    def meets_slos(o: RequestOutput) -> bool:  # a missing value fails the SLO it is needed for
        values = {"ttft": o.ttft_s, "tpot": 0.0 if o.output_tokens < 2 else o.tpot_s, "e2el": o.e2e_s}
        return all((v := values[key]) is not None and v * 1000.0 <= limit for key, limit in (slos or {}).items())

    samples_ms = {
        "ttft": [o.ttft_s * 1000.0 for o in ok if o.ttft_s is not None],
        "tpot": [t * 1000.0 for o in ok if (t := o.tpot_s) is not None],
        "itl": [gap * 1000.0 for o in ok for gap in o.itl_s],
        "e2el": [o.e2e_s * 1000.0 for o in ok],
        "queue_wait": [o.queue_wait_s * 1000.0 for o in ok if o.queue_wait_s is not None],
    }
    result: Result = {"label": label, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(settings or {})}
    result |= {"completed": done, "failed": len(load.outputs) - len(ok), "duration_s": load.duration_s}
    result |= {"total_input_tokens": tokens_in, "total_output_tokens": tokens_out, "request_throughput": per_s(done)}
    result |= {"output_throughput": per_s(tokens_out), "total_token_throughput": per_s(tokens_in + tokens_out)}
    result["goodput"] = per_s(sum(meets_slos(o) for o in ok)) if slos else None
    for name, ms in samples_ms.items():
        result |= {f"{stat}_{name}_ms": float(fn(ms)) if ms else None for stat, fn in STATS.items()}
    steal, health_ms = meter.steal_percent if meter else None, [s * 1000.0 for s in load.health_s]
    result |= {"goodput_slos_ms": dict(slos or {}), "steal_percent": steal}
    result["high_steal"] = (steal or 0) >= HIGH_STEAL_PERCENT
    result |= {"busy_percent": meter and meter.busy_percent, "other_percent": meter and meter.other_percent}
    result["processes"] = [  # each process tree: CPU ms per output token of the run, RSS at its end
        p | {"cpu_ms_per_token": 1000.0 * float(p["cpu_s"]) / tokens_out if tokens_out else None}
        for p in (meter.processes if meter else [])
    ]
    result["errors"] = [o.error for o in load.outputs if o.error is not None][:20]
    result |= {"health_polls": len(health_ms), "health_failures": load.health_failures}
    result |= {f"health_{p}_ms": percentile(health_ms, q) for p, q in (("p50", 50), ("p99", 99), ("max", 100))}
    result |= {f"{name}s_ms": samples_ms[name] for name in ("ttft", "tpot", "e2el", "queue_wait")}
    return result | {"output_lens": [o.output_tokens for o in ok], "input_lens": [o.prompt_tokens for o in ok]}


# /proc/cpuinfo flags that decide which matmul paths run (the engine's int8 selection, vLLM's dtype), as the report
# names them beside the CPU: in this order, each where any of its flags is present
ISA_CLASSES = (
    ("AVX2", ("avx2",)),
    ("AVX-512", ("avx512f",)),
    ("VNNI", ("avx512_vnni", "avx_vnni")),
    ("BF16", ("avx512_bf16",)),
    ("AMX", ("amx_int8", "amx_bf16", "amx_tile")),
)

CPU_IDS = (("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))  # label, /proc/cpuinfo key


def cpu_name(cpuinfo: str) -> str:
    """The first CPU of a /proc/cpuinfo text, named so that two reports on different CPUs can be told apart: the
    model name, its family, model and stepping (one model name covers several generations, "AMD EPYC" Zen 3 and
    Zen 4 alike), and the instruction-set classes that choose the matmul paths (``ISA_CLASSES``)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # the first processor's block ends at its blank line
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or "unknown"
    ids = [f"{label} {fields[key]}" for label, key in CPU_IDS if fields.get(key)]
    flags = set(fields.get("flags", "").split())
    isa = [label for label, names in ISA_CLASSES if flags & set(names)]
    details = "; ".join(part for part in (", ".join(ids), ", ".join(isa)) if part)
    return f"{name} ({details})" if details else name


# the engine's settings that change which kernels run on a CPU (services/engine settings.py), named in reports
ENGINE_CPU_KNOBS = ("GENMESH_ENGINE_MAX_CPU_ISA", "GENMESH_ENGINE_PLUGIN_CONFIG", "GENMESH_ENGINE_INT8_MATMUL")


def describe() -> dict[str, str]:
    """The machine and the software the figures were taken on."""
    cpuinfo = Path("/proc/cpuinfo")
    cpu = cpu_name(cpuinfo.read_text(encoding="utf-8", errors="replace") if cpuinfo.is_file() else "")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        # the report's own outputs (docs/) do not make the measured code dirty
        status = ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"]
        dirty = subprocess.run(status, capture_output=True, text=True).stdout.strip()
        version = commit.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        version = "unknown"
    openvino = importlib.metadata.version("openvino-genai")  # a dependency of genmesh-bench
    host = {"cpu": cpu, "cores": str(os.cpu_count())}
    host |= {"memory": f"{psutil.virtual_memory().total / 1024**3:.1f} GiB", "os": platform.platform()}
    host |= {"python": platform.python_version(), "openvino-genai": openvino, "genmesh commit": version}
    # the engines' CPU settings taken from the environment (an ISA cap makes this CPU stand in for another)
    knobs = [f"`{name}={os.environ[name]}`" for name in ENGINE_CPU_KNOBS if os.environ.get(name)]
    return host | ({"engine environment": ", ".join(knobs)} if knobs else {})


def save(results: Any, path: Path) -> Path:
    """``results`` as JSON (NaN as null, infinity as ``"inf"``) at ``path``."""
    clean = json.loads(json.dumps(results), parse_constant=lambda name: None if name == "NaN" else "inf")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean, indent=2) + "\n")
    return path
