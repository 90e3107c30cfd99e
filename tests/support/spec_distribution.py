"""Does a sampler draw from its model's own distribution? A chi-square test of sampled continuations
of a few tokens against the served model's exact probabilities (speculative decoding's test).

The first generated token comes from the prompt's prefill, before the draft proposes anything;
the later ones come from verification steps (a draft token kept, or the model's own in its place),
so the test is on whole continuations of ``length`` tokens (3: one step can keep a draft token and
add the next). The reference is the engine's scorer (``prompt_logprobs``: the served model's full
logits, before any sampling filter, independent of the pipeline that samples): P(t1) over the
prompt, P(t2 | t1) for each likely t1, and so on. A continuation is keyed by its tokens' texts.
Cells expected fewer than ``MIN_EXPECTED`` times, and what the reference's top tokens leave, are
pooled into one cell.

The test rejects at ``ALPHA`` whatever the seed: a correct sampler fails it one run in 10,000.
:func:`rejects` says whether another distribution's own expected counts would fail it (greedy
decoding's, the draft model's): the prompt then tells the two apart, so the test can fail.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.servers import ROOT

ALPHA = 1e-4
MIN_EXPECTED = 5.0
OTHER = "\x00other"  # the pooled cell's key: no continuation reads like it
SEP = "\x1f"  # between a continuation's token texts in its key (scripts/spec_sampling_probe.py: the same)
PROBE = ROOT / "scripts" / "spec_sampling_probe.py"


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X chi-square with ``dof`` degrees of freedom (integer ``dof``, closed form)."""
    if x <= 0:
        return 1.0
    half = x / 2
    k = 2 if dof % 2 == 0 else 1
    tail = math.exp(-half) if k == 2 else math.erfc(math.sqrt(half))
    while k < dof:  # Q(x; k + 2) = Q(x; k) + (x/2)^(k/2) e^(-x/2) / Gamma(k/2 + 1)
        tail += math.exp((k / 2) * math.log(half) - half - math.lgamma(k / 2 + 1))
        k += 2
    return min(1.0, tail)


def _top(url: str, ids: list[int], position: int, top: int) -> dict[int, tuple[float, str]]:
    """The ``top`` most likely tokens at ``position`` of ``ids`` (token p given tokens 0..p-1)."""
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": top}
    r = httpx.post(url + "/v1/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    entries = r.json()["choices"][0]["prompt_logprobs"][position]
    return {
        int(tid): (e["logprob"], e["decoded_token"] or "")
        for tid, e in entries.items()
        if e["rank"] is not None and e["rank"] <= top
    }


def _key(texts: Sequence[str]) -> str:
    return SEP.join(texts)


def continuation_distribution(url: str, prompt: str, length: int, n: int, top: int = 20) -> dict[str, float]:
    """Continuation (its tokens' texts) -> probability, for the continuations of ``length`` tokens that
    ``n`` samples could see often enough to test, from the model served at ``url`` (its scorer): a
    prefix is extended with its ``top`` likeliest next tokens while it is expected MIN_EXPECTED times."""
    r = httpx.post(url + "/tokenize", json={"prompt": prompt, "add_special_tokens": False}, timeout=60)
    assert r.status_code == 200, r.text
    ids: list[int] = r.json()["tokens"]
    level: dict[tuple[int, ...], tuple[float, tuple[str, ...]]] = {(): (1.0, ())}
    for depth in range(length):
        deeper: dict[tuple[int, ...], tuple[float, tuple[str, ...]]] = {}
        for prefix, (p, texts) in level.items():
            if n * p < MIN_EXPECTED:
                continue  # its continuations fall in the pooled cell
            for tid, (lp, text) in _top(url, [*ids, *prefix, ids[-1]], len(ids) + depth, top).items():
                deeper[(*prefix, tid)] = (p * math.exp(lp), (*texts, text))
        level = deeper
    cells: dict[str, float] = {}
    for p, texts in level.values():
        cells[_key(texts)] = cells.get(_key(texts), 0.0) + p
    return cells


def sample_continuations(url: str, prompt: str, length: int, n: int, concurrency: int = 8) -> Counter[str]:
    """``n`` continuations of ``length`` tokens sampled at temperature 1, keyed as the reference keys
    them; one that ends early (an end-of-text token) is pooled. Every request must succeed."""
    body = {"prompt": prompt, "max_tokens": length, "temperature": 1.0, "logprobs": 1}

    def one(_: int) -> str:
        r = httpx.post(url + "/v1/completions", json=body, timeout=600)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        return _key(choice["logprobs"]["tokens"]) if choice["finish_reason"] == "length" else OTHER

    with ThreadPoolExecutor(concurrency) as pool:
        return Counter(pool.map(one, range(n)))


@dataclass(frozen=True)
class Verdict:
    statistic: float
    dof: int
    p_value: float
    cells: list[tuple[str, int, float]]  # key, observed, expected

    def __str__(self) -> str:
        shown = ", ".join(f"{k.replace(SEP, '|')!r}: {o} vs {e:.1f}" for k, o, e in self.cells)
        return f"chi-square {self.statistic:.1f} on {self.dof} dof, p = {self.p_value:.3g} ({shown})"


def _pooled(probs: Mapping[str, float], n: int) -> dict[str, float]:
    """Cells expected at least MIN_EXPECTED times, the rest (and the unlisted mass) in ``OTHER``."""
    kept = {k: p for k, p in sorted(probs.items(), key=lambda kv: -kv[1]) if n * p >= MIN_EXPECTED}
    while kept and n * (1.0 - sum(kept.values())) < MIN_EXPECTED:
        kept.popitem()  # the smallest kept cell joins the pool until the pool is big enough
    kept[OTHER] = max(0.0, 1.0 - sum(kept.values()))
    return kept


def _verdict(rows: list[tuple[str, int, float]]) -> Verdict:
    stat = sum((o - e) ** 2 / e for _, o, e in rows)
    return Verdict(stat, len(rows) - 1, chi2_sf(stat, len(rows) - 1), rows)


def chi_square(observed: Counter[str], probs: Mapping[str, float]) -> Verdict:
    """Pearson's test of ``observed`` continuations against the reference ``probs``."""
    n = sum(observed.values())
    cells = _pooled(probs, n)
    seen = {k: observed[k] for k in cells if k != OTHER}
    seen[OTHER] = n - sum(seen.values())
    return _verdict([(k, seen[k], n * p) for k, p in cells.items() if n * p > 0])


def rejects(other: Mapping[str, float], probs: Mapping[str, float], n: int) -> Verdict:
    """The test's verdict on samples that came out exactly as ``other`` expects them (a power check)."""
    cells = _pooled(probs, n)
    mass = {k: other.get(k, 0.0) for k in cells if k != OTHER}
    mass[OTHER] = max(0.0, 1.0 - sum(mass.values()))
    return _verdict([(k, round(n * mass[k]), n * p) for k, p in cells.items() if n * p > 0])


def rejects_greedy(probs: Mapping[str, float], n: int) -> Verdict:
    """:func:`rejects` for greedy decoding (every sample the likeliest cell): a prompt whose verdict is
    small here spreads its continuations enough for the test to catch a sampler that ignores temperature."""
    return rejects({max(probs, key=probs.__getitem__): 1.0}, probs, n)


def sample_drafted(
    model: Path, draft: Path, prompt: str, length: int, n: int, timeout_s: float, draft_tokens: int | None = None
) -> Counter[str]:
    """``n`` continuations from OpenVINO GenAI's pipeline drafting with ``draft`` (the engine refuses
    sampled drafting), through scripts/spec_sampling_probe.py in its own process, keyed as above;
    ``draft_tokens``: its ``--draft-tokens`` (None: the script's default)."""
    argv = [sys.executable, str(PROBE), "--model", str(model), "--draft", str(draft), "--prompt", prompt]
    argv += ["--length", str(length), "--samples", str(n)]
    argv += [] if draft_tokens is None else ["--draft-tokens", str(draft_tokens)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = Counter(json.loads(done.stdout.strip().splitlines()[-1])["counts"])
    assert sum(counts.values()) == n
    return counts
