"""``scripts/int8_probe/read_bandwidth.cpp``: the memory read rate that a decode step's floor is stated against
(issue 56). Built with g++ (which ``make native`` needs anyway) and run on a small buffer: the figure is printed
and every byte was read (the checksum is the sum of the buffer's 64-bit words, once per pass)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "scripts" / "int8_probe" / "read_bandwidth.cpp"


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.fail("g++ is missing: the engine's extension needs it too (make native)")
    out = tmp_path_factory.mktemp("bw") / "read_bandwidth"
    subprocess.run(["g++", "-O2", "-mavx2", "-pthread", str(SOURCE), "-o", str(out)], check=True, timeout=120)
    return out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_it_reads_every_word_and_prints_a_rate(binary: Path, threads: int) -> None:
    mib, passes = 16, 2
    run = subprocess.run([str(binary), str(threads), str(mib), str(passes)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    found = re.search(r"best ([\d.]+) GB/s, median ([\d.]+) GB/s \(check (-?\d+)\)", run.stdout)
    assert found, run.stdout
    best, median, check = float(found[1]), float(found[2]), int(found[3])
    assert best >= median > 0
    words = mib * 2**20 // 8  # the buffer holds 0, 1, ..., words - 1; each thread's slice is summed once a pass
    assert check == passes * words * (words - 1) // 2


def test_a_zero_argument_is_refused(binary: Path) -> None:
    run = subprocess.run([str(binary), "0"], capture_output=True, text=True, timeout=10)
    assert run.returncode == 2
    assert "usage" in run.stderr
