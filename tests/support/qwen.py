"""Qwen2.5-Coder 1.5B and its 0.5B draft (``make model-qwen``) for ``make test-qwen`` (tests/qwen)."""

from __future__ import annotations

from pathlib import Path

from support.servers import ROOT, Server, start_engine

QWEN_15B = ROOT / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_05B = ROOT / "models" / "qwen2.5-coder-0.5b-instruct.gguf"
QWEN_NAME = "qwen2.5-coder-1.5b-instruct"
# No scorer (top_logprobs): it would compile a second copy of the 1.5B. A step of the 1.5B on two
# cores shared with other work can take tens of seconds (eight prompts' prefill: 30 s at a load
# average of 16): the hung-core watchdog and the health check wait longer than their 30 s and 60 s.
QWEN_ARGS = ("--max-num-scoring-seqs", "0", "--startup-timeout-s", "1800")
QWEN_ARGS += ("--watchdog-timeout-s", "600", "--stall-timeout-s", "600")
LOAD_TIMEOUT_S = 1800.0  # the first load re-encodes the GGUF (minutes on 2 busy cores)


def start_qwen(log_dir: Path, *extra: str) -> Server:
    assert QWEN_15B.is_file(), "run 'make model-qwen' first (make test-qwen does it)"
    return start_engine(log_dir, *QWEN_ARGS, *extra, model=QWEN_15B, timeout_s=LOAD_TIMEOUT_S)
