"""CPU steal time from ``/proc/stat``, and how much of the machine's CPU went to other work.

On a shared VM a figure is only comparable with one taken under similar conditions, so every
measurement is wrapped in a :class:`StealMeter`: steal (time the hypervisor gave our vCPUs to
other guests) and "other" CPU (busy time in this guest not spent by the benchmarked process
trees, e.g. another test run on the same machine).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CpuTimes:
    """Aggregate jiffies of all CPUs (the ``cpu`` line)."""

    busy: int
    idle: int
    steal: int

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.steal


def read_cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The ``cpu`` line of ``/proc/stat``, or ``None`` where there is none (not Linux)."""
    try:
        with path.open() as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is already in user.
    values = [int(v) for v in fields[1:9]] + [0] * max(0, 8 - len(fields[1:9]))
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return CpuTimes(busy=user + nice + system + irq + softirq, idle=idle + iowait, steal=steal)


def steal_percent(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    if before is None or after is None:
        return None
    total = after.total - before.total
    if total <= 0:
        return None
    return 100.0 * (after.steal - before.steal) / total


def busy_percent(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    if before is None or after is None:
        return None
    total = after.total - before.total
    if total <= 0:
        return None
    return 100.0 * (after.busy - before.busy) / total


def _tree_cpu_s(roots: Sequence[int], known: dict[int, float]) -> None:
    """Update ``known`` (pid -> CPU seconds) with the current CPU time of each root and its descendants."""
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            known[proc.pid] = t.user + t.system


class StealMeter:
    """``with StealMeter(pids) as m: ...`` then ``m.steal_percent``, ``m.busy_percent``, ``m.other_percent``.

    Percentages are of the whole machine (all CPUs) over the interval. ``pids`` are the roots of
    the process trees being measured; their CPU time is subtracted from ``busy`` to give ``other``.
    """

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self._pids = tuple(pids) or (os.getpid(),)
        self._before: CpuTimes | None = None
        self._after: CpuTimes | None = None
        self._own_before: dict[int, float] = {}
        self._own_after: dict[int, float] = {}

    def __enter__(self) -> StealMeter:
        _tree_cpu_s(self._pids, self._own_before)
        self._before = read_cpu_times()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._after = read_cpu_times()
        _tree_cpu_s(self._pids, self._own_after)

    @property
    def steal_percent(self) -> float | None:
        return steal_percent(self._before, self._after)

    @property
    def busy_percent(self) -> float | None:
        return busy_percent(self._before, self._after)

    @property
    def own_percent(self) -> float | None:
        """CPU used by the measured process trees, as a share of the machine."""
        if self._before is None or self._after is None or self._after.total <= self._before.total:
            return None
        own_s = sum(t - self._own_before.get(pid, 0.0) for pid, t in self._own_after.items())
        total_s = (self._after.total - self._before.total) / os.sysconf("SC_CLK_TCK")
        return 100.0 * own_s / total_s

    @property
    def other_percent(self) -> float | None:
        """Busy CPU not used by the measured process trees (other work on this machine)."""
        busy, own = self.busy_percent, self.own_percent
        return None if busy is None or own is None else max(0.0, busy - own)


# -- judging on quiet measurements --------------------------------------------------------------

QUIET_STEAL_PCT = 5.0


def is_quiet(steals: Iterable[float | None], max_steal_pct: float = QUIET_STEAL_PCT) -> bool:
    """Whether no side of a measurement lost more than ``max_steal_pct`` of the CPU to steal
    (an unknown steal is not quiet)."""
    return all(s is not None and s <= max_steal_pct for s in steals)


def quiet_indices(steals: Sequence[Iterable[float | None]], max_steal_pct: float = QUIET_STEAL_PCT) -> list[int] | None:
    """The rule every comparison is judged by: the indices of the quiet measurements (each given
    as the steal of its sides) when two or more are quiet; ``None`` when fewer are, and then the
    judgement is made on all of them.

    On a shared VM the hypervisor's steal lands on one side of a comparison and not the other
    (seen: 19 % and 31 % in two microservice batches, under 2 % in every engine batch; 10 % on an
    HTTP side, 4 % on its in-process partner, ratio 0.78 where the next pair gave 0.96)."""
    keep = [i for i, sides in enumerate(steals) if is_quiet(sides, max_steal_pct)]
    return keep if len(keep) >= 2 else None
