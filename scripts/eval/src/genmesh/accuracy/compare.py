"""Served results against the reference fixture: the figures ``make eval`` prints and the bounded
test asserts, always as distributions (median, p95) and counts, never one item."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64))) if xs else float("nan")


def p95(xs: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), 95)) if xs else float("nan")


@dataclass(frozen=True)
class ChoiceFigures:
    items: int
    accuracy: float
    reference_accuracy: float
    agreement: float  # the served pick is the reference's pick
    median_dll: float  # |served - reference| log-likelihood per choice, nats
    p95_dll: float


def choice_figures(served: dict[str, list[float]], fixture: list[dict[str, Any]]) -> ChoiceFigures:
    """``served``: item id -> log-likelihood of each choice (the fixture's order)."""
    hit = ref_hit = agree = 0
    deltas: list[float] = []
    items = [m for m in fixture if m["id"] in served]
    for m in items:
        ll = served[m["id"]]
        ref = [c["ll"] for c in m["reference"]]
        pick, ref_pick = int(np.argmax(ll)), int(np.argmax(ref))
        hit += int(pick == m["gold"])
        ref_hit += int(ref_pick == m["gold"])
        agree += int(pick == ref_pick)
        deltas.extend(abs(a - b) for a, b in zip(ll, ref, strict=True))
    n = max(len(items), 1)
    return ChoiceFigures(len(items), hit / n, ref_hit / n, agree / n, median(deltas), p95(deltas))


@dataclass(frozen=True)
class TokenFigures:
    tokens: int
    median_dlp: float  # |served - reference| log-probability per generated token, nats
    p95_dlp: float
    top_agreement: float  # the reference's most likely token is the served token


def token_figures(pairs: Sequence[tuple[float, float, bool]]) -> TokenFigures:
    """``pairs``: (served logprob, reference logprob, reference argmax == served token) per token."""
    deltas = [abs(a - b) for a, b, _ in pairs]
    return TokenFigures(len(pairs), median(deltas), p95(deltas), sum(t for *_, t in pairs) / max(len(pairs), 1))


def answers_equal(served: dict[str, str], fixture: list[dict[str, Any]]) -> tuple[int, int]:
    """How many greedy chat answers equal the reference's (whitespace at the ends ignored)."""
    items = [c for c in fixture if c["id"] in served]
    return sum(served[c["id"]].strip() == c["answer"].strip() for c in items), len(items)


def answer_pairs(logprobs: dict[str, Any], item: dict[str, Any]) -> list[tuple[float, float, bool]]:
    """``token_figures``'s pairs for one reference chat item as the served model scored it (the
    completions ``logprobs`` of prompt + reference answer, ``echo``, ``logprobs`` 1)."""
    start = len(item["prompt_ids"])
    pairs: list[tuple[float, float, bool]] = []
    for j, ref in enumerate(item["answer_logprobs"]):
        top: dict[str, float] = logprobs["top_logprobs"][start + j]
        same = max(top, key=lambda t: top[t]) == logprobs["tokens"][start + j]
        pairs.append((float(logprobs["token_logprobs"][start + j]), float(ref), same))
    return pairs
