"""What each measured process tree spends in a run: CPU seconds and resident memory, for the report's
"CPU ms per output token" and "RSS" of every process (the engine counts with its core process)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

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
        if "-m" in argv[:-1]:
            module = argv[argv.index("-m") + 1]
            return module.removeprefix("genmesh.")
        return os.path.basename(argv[0]) if argv else proc.name()
    return str(proc.pid)


def _tree(root: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [root, *root.children(recursive=True)]
    return [root]


def sample(roots: Sequence[int]) -> dict[int, TreeSample]:
    """Each root's tree now (a root that is gone is left out). A root below another (the servers the
    load generator started) is its own tree, not part of its parent's."""
    out: dict[int, TreeSample] = {}
    trees: dict[int, list[psutil.Process]] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            trees[root] = _tree(psutil.Process(root))
    for root, tree in trees.items():
        inner = {p.pid for r in (p.pid for p in tree[1:] if p.pid in trees) for p in trees[r]}
        with contextlib.suppress(psutil.Error):
            top = tree[0]
            cpu = rss = 0.0
            for proc in [top, *(p for p in tree[1:] if p.pid not in inner)]:
                with contextlib.suppress(psutil.Error):
                    cpu += sum(proc.cpu_times()[:2])
                    rss += proc.memory_info().rss / 2**20
            out[root] = TreeSample(tree_name(top), cpu, rss)
    return out


def usage(before: dict[int, TreeSample], after: dict[int, TreeSample]) -> list[dict[str, float | str]]:
    """Per tree: the CPU seconds spent between the samples and the RSS at the second."""
    return [
        {"process": a.name, "cpu_s": a.cpu_s - before[pid].cpu_s, "rss_mib": a.rss_mib}
        for pid, a in after.items()
        if pid in before
    ]
