"""``py-spy`` on a server under load: record while a run goes, then the functions that took the most samples."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import TracebackType


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.is_file() else shutil.which("py-spy")


def top_functions(collapsed: str, n: int = 12) -> list[tuple[str, float]]:
    """(function, share of all samples in which it is the innermost frame), highest first, from
    py-spy's ``--format raw`` output (collapsed stacks: ``frame;frame;frame COUNT`` per line)."""
    leaf: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        leaf[stack.split(";")[-1].strip()] += int(count)
    return [(name, c / total) for name, c in leaf.most_common(n)] if total else []


class Profile:
    """``with Profile(pid, out) as p: ...`` records the process tree of ``pid`` into ``out`` (collapsed stacks)."""

    def __init__(self, pid: int, out: Path, rate: int = 50) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None

    def __enter__(self) -> Profile:
        binary = py_spy()
        if binary is None:
            self.error = "py-spy not installed"
            return self
        self.out.parent.mkdir(parents=True, exist_ok=True)
        argv = [binary, "record", "--pid", str(self.pid), "--subprocesses", "--format", "raw", "--nonblocking"]
        argv += ["--rate", str(self.rate), "-o", str(self.out)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.out.is_file():
            self.error = f"py-spy wrote nothing: {err.decode(errors='replace')[-300:]}"

    def top(self, n: int = 12) -> list[tuple[str, float]]:
        if self.error or not self.out.is_file():
            return []
        return top_functions(self.out.read_text(errors="replace"), n)
