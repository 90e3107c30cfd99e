"""The report's table: ratios to the ceiling and to the best peer per load level, steal flags, profiles."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import pytest

from genmesh.bench import servers
from genmesh.bench.cli import build_parser
from genmesh.bench.render import level, plot_all, table
from genmesh.bench.report import (
    Report,
    add_arguments,
    high_steal_note,
    model_about,
    ratios,
    resources_table,
    results_table,
    top_functions,
)
from genmesh.bench.servers import vllm_model
from genmesh.engine.models.cpu_threads import CpuFiles, cpu_flags
from genmesh.engine.settings import DEFAULT_MODEL


def run(
    target: str, conc: int | None, tput: float, *, peer: bool = False, rate: float | None = None, steal: float = 1.0
) -> dict[str, Any]:
    return {
        "label": target,
        "target": target,
        "peer": peer,
        "max_concurrency": conc,
        "request_rate": rate,
        "completed": 4,
        "failed": 0,
        "output_throughput": tput,
        "request_throughput": 1.0,
        "steal_percent": steal,
        "high_steal": steal >= 10.0,
        "median_ttft_ms": 12.0,
        "ttfts_ms": [10.0, 12.0, 14.0],
        "tpots_ms": [5.0, 6.0],
    }


RUNS = [
    run("inprocess", 8, 400.0),
    run("engine", 8, 300.0),
    run("vllm", 8, 150.0, peer=True),
    run("llama", 8, 200.0, peer=True, steal=30.0),
    run("inprocess", 1, 40.0),
    run("engine", 1, 30.0),
    run("llama", 1, 60.0, peer=True),
    run("engine", None, 50.0, rate=2.0),
    run("llama", None, 25.0, peer=True, rate=2.0),
]


def test_levels() -> None:
    assert level(RUNS[0]) == "c=8"
    assert level(RUNS[-1]) == "2 req/s"
    assert level(run("x", 4, 1.0, rate=0.5)) == "0.5 req/s, c<=4"
    assert level(run("x", None, 1.0, rate=8.0) | {"dataset": "mixed"}) == "8 req/s mixed"
    assert level(run("x", 8, 1.0) | {"dataset": "random"}) == "c=8"


def test_a_mixed_set_level_compares_only_with_its_own_set() -> None:
    mixed = [run("engine", 8, 90.0) | {"dataset": "mixed"}, run("llama", 8, 100.0, peer=True) | {"dataset": "mixed"}]
    r = ratios([*RUNS, *mixed], "inprocess")
    assert r[len(RUNS)] == (None, pytest.approx(0.9))  # against llama's mixed run, not its random c=8 one


def test_ratios_compare_within_a_level() -> None:
    r = ratios(RUNS, "inprocess")
    assert r[1] == (pytest.approx(0.75), pytest.approx(1.5))  # engine c=8 vs 400 and vs the best peer 200
    assert r[5] == (pytest.approx(0.75), pytest.approx(0.5))  # engine c=1 vs 40 and vs llama 60
    assert r[7] == (None, pytest.approx(2.0))  # no in-process line at a request rate


def test_markdown_table_rows_and_steal_flag() -> None:
    rows = results_table(RUNS, "inprocess").splitlines()
    assert len(rows) == 2 + len(RUNS)
    assert rows[1].startswith("| --- | --- |")
    assert "| engine | c=8 | 4/0 |" in rows[3]
    assert "| 0.75 | 1.50 |" in rows[3]
    assert "30.0 ⚠" in rows[5]
    note = high_steal_note(RUNS)
    assert note is not None
    assert "llama c=8 (30.0 %)" in note
    assert high_steal_note(RUNS[:2]) is None


def test_resources_table_names_every_process_tree() -> None:
    gateway = run("gateway", 32, 200.0) | {
        "processes": [
            {"process": "engine", "cpu_s": 9.0, "rss_mib": 812.4, "cpu_ms_per_token": 4.5},
            {"process": "gateway", "cpu_s": 0.4, "rss_mib": 95.0, "cpu_ms_per_token": 0.2},
        ]
    }
    rows = resources_table([gateway, RUNS[0]]).splitlines()
    assert rows[2] == "| gateway | c=32 | engine: 4.50 ms/token, 812 MiB; gateway: 0.20 ms/token, 95 MiB |"
    assert rows[3] == "| inprocess | c=8 | - |"  # a run without the figures (older results) says so


def test_serve_prints_the_report_table_without_ratio_columns() -> None:
    text = results_table(RUNS, None, markdown=False).splitlines()
    assert text[0].split()[:3] == ["line", "load", "ok/failed"]
    assert "vs" not in text[0]  # no baseline: no ratio columns
    assert len(text) == 2 + len(RUNS)


def test_text_tables_align_right_under_a_rule() -> None:
    assert table(["run", "tok/s"], [["1", "30.5"], ["median", "7.0"]]).splitlines() == [
        "   run  tok/s",
        "------  -----",
        "     1   30.5",
        "median    7.0",
    ]


def test_plots_write_pngs(tmp_path: Path) -> None:
    files = plot_all(RUNS, tmp_path, prefix="t-")
    assert [f.name for f in files] == ["t-throughput.png", "t-ttft.png", "t-tpot.png"]
    assert all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in files)
    at_top = plot_all(RUNS, tmp_path / "top", top=1)  # the distributions of the runs at c=1 only
    assert [f.name for f in at_top] == ["throughput.png", "ttft.png", "tpot.png"]
    assert plot_all([run("x", None, 1.0, rate=2.0) | {"ttfts_ms": [], "tpots_ms": []}], tmp_path / "none") == []


def test_profile_top_functions_from_collapsed_stacks() -> None:
    collapsed = "main;loop;step (core.py:10) 60\nmain;loop;recv (zmq.py:3) 30\nmain;send (http.py:5) 10\nbad line\n"
    top = top_functions(collapsed, 2)
    assert top == [("step (core.py:10)", pytest.approx(0.6)), ("recv (zmq.py:3)", pytest.approx(0.3))]
    assert top_functions("") == []


def test_the_report_carries_its_hand_written_notes(tmp_path: Path) -> None:
    """``docs/benchmarks-notes.md`` (levers tried, why a gap remains) goes into the generated report as it is."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "benchmarks.md"
    report = Report(parser.parse_args(["--out", str(out)]))
    assert "Levers tried" not in report.markdown([], out)
    (tmp_path / "benchmarks-notes.md").write_text("## Levers tried\n\n| lever | c=1 |\n")
    text = report.markdown([], out)
    assert "## Levers tried\n\n| lever | c=1 |" in text
    assert text.index("## Results") < text.index("## Levers tried")


def test_a_report_on_another_model_names_it_skips_the_ir_lines_and_finds_its_vllm_folder(tmp_path: Path) -> None:
    """``make bench-report MODEL=qwen-1.5b``: the model is a parameter; the IR exports are the default
    model's, so their lines are skipped with a note, and vLLM's folder is that model's conversion."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    other = tmp_path / "other-model.gguf"
    shutil.copy(DEFAULT_MODEL, other)  # any GGUF: the report reads its tokenizer to size prompts
    out = tmp_path / "benchmarks.md"
    report = Report(parser.parse_args(["--model", str(other), "--out", str(out), "--lines", "ir-int8", "draft"]))
    report.run()  # neither line starts anything: no export of this model, no --draft-model
    assert report.runs == []
    assert any("default model only" in n for n in report.notes)
    assert any("no `--draft-model`" in n for n in report.notes)
    assert f"`{other}` (GGUF `other-model.gguf`" in report.markdown([], out)
    assert vllm_model(str(other)) == Path("models/other-model-hf")
    assert vllm_model(DEFAULT_MODEL) == Path("models/SmolLM2-135M-Instruct-hf")
    assert model_about(DEFAULT_MODEL) == "SmolLM2-135M-Instruct, GGUF Q4_1"


def test_vllm_runs_bf16_only_where_the_cpu_multiplies_bf16(tmp_path: Path) -> None:
    assert servers.vllm_dtype({"avx2", "avx512f", "avx512_bf16"}) == "bfloat16"
    assert servers.vllm_dtype({"avx2", "amx_bf16", "amx_tile"}) == "bfloat16"
    assert servers.vllm_dtype({"avx2", "fma", "avx512f"}) == "float32"  # AVX-512 without BF16 too
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert servers.vllm_dtype(cpu_flags(CpuFiles(cpuinfo))) == "bfloat16"  # the engine's reader, as vllm_peer uses it
    assert servers.vllm_dtype(cpu_flags(CpuFiles(tmp_path / "missing"))) == "float32"
    peer = servers.vllm_peer(dtype="float32")
    assert peer.env["VLLM_DTYPE"] == "float32"
    assert "`--dtype float32`" in peer.settings


def test_the_report_names_the_command_that_wrote_it(tmp_path: Path) -> None:
    """A report run by hand (an ISA cap, another llama-server) says so: its header carries the arguments."""
    argv = ["report", "--out", str(tmp_path / "b.md"), "--lines", "engine", "--llama-binary", "/opt/llama server"]
    args = build_parser().parse_args(argv)
    args.argv = argv  # as cli.main records them
    text = Report(args).markdown([], tmp_path / "b.md")
    command = f"genmesh-bench report --out {tmp_path / 'b.md'} --lines engine --llama-binary '/opt/llama server'"
    assert f"Written by `{command}` on " in text
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert "Written by `make bench-report` on " in Report(parser.parse_args([])).markdown([], tmp_path / "b.md")
