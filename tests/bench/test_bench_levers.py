"""``genmesh-bench levers``: variants' flags reach their engines (after the defaults, so they win), and a
sweep on the real engine gives one row per variant and level, paired against the first variant."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from genmesh.bench.levers import LLAMA, add_arguments, parse_variant, run, summarise
from genmesh.bench.servers import MODEL_NAME
from genmesh.engine.settings import parse_settings
from support.servers import DEFAULT_MODEL


def test_a_variant_is_a_name_and_engine_flags_that_override_the_defaults() -> None:
    name, flags = parse_variant("mnbt384=--max-num-batched-tokens 384 --plugin-config '{\"A\": 1}'")
    assert name == "mnbt384"
    assert flags == ["--max-num-batched-tokens", "384", "--plugin-config", '{"A": 1}']
    assert parse_variant("base=") == ("base", [])
    settings = parse_settings(["--model", "m.gguf", *flags])
    assert settings.max_num_batched_tokens == 384
    assert settings.plugin_config == {"A": 1}
    with pytest.raises(ValueError, match="NAME=FLAGS"):
        parse_variant("--max-num-seqs 4")


def test_ratios_pair_each_round_with_the_first_variants_same_round() -> None:
    def r(tput: float) -> dict[str, float | int | None]:
        return {"output_throughput": tput, "max_concurrency": 8, "request_rate": None, "steal_percent": 1.0}

    rows = summarise({"base": [r(100.0), r(50.0), r(80.0)], "new": [r(110.0), r(60.0), r(80.0)]}, "base")
    assert [row["ratio_to_first"] for row in rows] == [1.0, pytest.approx(1.1)]  # median of 1.1, 1.2, 1.0
    assert rows[1]["output_throughput"] == 80.0  # the median over rounds


def test_the_ratio_base_and_the_llama_server_variant_are_checked_before_anything_starts(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    common = ["--result-dir", str(tmp_path), "--log-dir", str(tmp_path / "logs"), "--variant", "exact="]
    with pytest.raises(SystemExit, match="--ratio-to f16: not a variant"):
        run(parser.parse_args([*common, "--ratio-to", "f16"]))
    with pytest.raises(SystemExit, match=f"not be {LLAMA}"):
        run(parser.parse_args([*common, "--variant", f"{LLAMA}=", "--llama-server"]))
    with pytest.raises(SystemExit, match="must differ"):
        run(parser.parse_args([*common, "--llama-variant", "exact=--no-repack"]))
    with pytest.raises(SystemExit, match="nothing to measure"):
        run(parser.parse_args(common[:-2]))
    assert not (tmp_path / "logs").exists()  # no server was started


def test_a_sweep_on_the_real_engine(tmp_path: Path) -> None:
    argv = [str(Path(sys.executable).parent / "genmesh-bench"), "levers", "--model", str(DEFAULT_MODEL)]
    argv += ["--variant", "base=", "--variant", "seqs2=--max-num-seqs 2", "--concurrency", "4", "--request-rates"]
    argv += ["--output-len", "16", "--input-len", "16", "--rounds", "2", "--dataset-name", "mixed", "--fresh-prompts"]
    argv += ["--result-dir", str(tmp_path), "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(next(tmp_path.glob("levers-*.json")).read_text())
    assert saved["variants"] == {"base": "", "seqs2": "--max-num-seqs 2"}
    rows = {row["variant"]: row for row in saved["rows"]}
    assert set(rows) == {"base", "seqs2"}
    assert all(row["level"] == "c=4 mixed" and row["rounds"] == 2 and row["failed"] == 0 for row in rows.values())
    assert rows["base"]["ratio_to_first"] == 1.0
    assert rows["seqs2"]["output_throughput"] > 0
    assert len(saved["runs"]) == 4
    lens = {(r["variant"], r["round"]): sorted(r["input_lens"]) for r in saved["runs"]}
    assert lens["base", 1] == lens["seqs2", 1]  # a round gives every variant the same prompts ...
    assert lens["base", 1] != lens["base", 2]  # ... and --fresh-prompts new ones each round
    assert "| c=4 mixed | seqs2 |" in done.stdout
    assert saved["engines"]["seqs2"].endswith("--max-num-seqs 2")  # the variant's flags, after the engine's own
    assert saved["engines"]["base"].endswith(f"--served-model-name {MODEL_NAME}")
