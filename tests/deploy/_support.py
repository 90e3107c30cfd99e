"""Shared helpers of the deployment tests (no fixtures here; see conftest.py)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_DIR = ROOT / "services" / "engine"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def argv(self, line: int = 0) -> list[str]:
        """The printed command, split back into words exactly as the shell would."""
        lines = self.stdout.strip().splitlines()
        assert len(lines) > line, f"expected a printed command, got stdout={self.stdout!r} stderr={self.stderr!r}"
        return shlex.split(lines[line])

    def ok(self) -> Result:
        assert self.returncode == 0, f"exit {self.returncode}\nstdout: {self.stdout}\nstderr: {self.stderr}"
        return self

    def fails(self, *words: str) -> Result:
        assert self.returncode != 0, f"expected a failure, got exit 0 with {self.stdout!r}"
        assert "error:" in self.stderr, self.stderr
        for word in words:
            assert word in self.stderr, f"{word!r} not in {self.stderr!r}"
        assert self.stdout == "", f"nothing may be printed as a command on error, got {self.stdout!r}"
        return self


RunScript = Callable[..., Result]


def clean_env(home: Path) -> dict[str, str]:
    """A minimal environment: no proxies, tokens or the developer's own settings leak into the tests."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


def flag(argv: list[str], name: str) -> str:
    """The value after ``name`` (``--flag value``) or in ``--flag=value``; fails when absent or repeated."""
    values = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == name]
    values += [word.split("=", 1)[1] for word in argv if word.startswith(name + "=")]
    assert len(values) == 1, f"{name} appears {len(values)} times in {argv}"
    return values[0]


def assert_in_order(text: str, steps: list[str] | tuple[str, ...]) -> None:
    """Every step occurs in ``text``, in this order."""
    positions = [text.find(step) for step in steps]
    assert all(p >= 0 for p in positions), (positions, text)
    assert positions == sorted(positions), text


def flags(argv: list[str], name: str) -> list[str]:
    """Every value after ``name`` (a flag given several times, e.g. ``--build-arg``), in order."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == name]


def env_pairs(argv: list[str]) -> dict[str, str | None]:
    """Every ``-e NAME[=VALUE]`` of a docker command (None: passed by name)."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv[:-1]):
        if word == "-e":
            name, sep, value = argv[i + 1].partition("=")
            out[name] = value if sep else None
    return out
