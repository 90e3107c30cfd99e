"""The chi-square test behind speculative decoding's sampled-distribution test
(tests/support/spec_distribution.py): its tail probability and its pooling, without an engine."""

from __future__ import annotations

from collections import Counter

import pytest

from support.spec_distribution import ALPHA, MIN_EXPECTED, OTHER, chi2_sf, chi_square, rejects


@pytest.mark.parametrize(
    ("x", "dof", "tail"),
    [(3.841, 1, 0.05), (5.991, 2, 0.05), (11.070, 5, 0.05), (18.307, 10, 0.05), (31.410, 20, 0.05), (0.5, 3, 0.9189)],
)
def test_the_tail_matches_the_tables(x: float, dof: int, tail: float) -> None:
    assert chi2_sf(x, dof) == pytest.approx(tail, abs=2e-4)


def test_rare_cells_and_the_unlisted_mass_are_pooled() -> None:
    probs = {"a": 0.5, "b": 0.3, "c": 0.004}  # c is expected 1.6 times in 400: pooled with the missing 0.196
    verdict = chi_square(Counter({"a": 200, "b": 120, "c": 2, "z": 78}), probs)
    assert [k for k, _, _ in verdict.cells] == ["a", "b", OTHER]
    assert [o for _, o, _ in verdict.cells] == [200, 120, 80]
    assert all(e >= MIN_EXPECTED for _, _, e in verdict.cells)
    assert verdict.dof == 2
    assert verdict.p_value > 0.5  # observed as expected


def test_a_sampler_that_favours_the_mode_is_rejected_and_one_that_does_not_is_not() -> None:
    probs = {"a": 0.4, "b": 0.3, "c": 0.2, "d": 0.1}
    assert rejects(probs, probs, 400).p_value == pytest.approx(1.0)
    assert rejects({"a": 0.55, "b": 0.25, "c": 0.15, "d": 0.05}, probs, 400).p_value < ALPHA
    assert rejects({"a": 1.0}, probs, 400).p_value < ALPHA  # greedy
