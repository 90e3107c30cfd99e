"""Poisson (gamma) arrival times."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genmesh.bench.load import arrival_offsets


def test_infinite_rate_sends_everything_at_once() -> None:
    assert arrival_offsets(5, math.inf) == [0.0] * 5


def test_mean_gap_is_one_over_the_rate() -> None:
    offsets = arrival_offsets(20000, 4.0, seed=1)
    gaps = np.diff(offsets)
    assert offsets[0] == 0.0
    assert all(g >= 0 for g in gaps)
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() == pytest.approx(0.25, rel=0.05)  # exponential: std equals the mean


def test_burstiness_changes_the_spread_not_the_mean() -> None:
    bursty = np.diff(arrival_offsets(20000, 2.0, burstiness=0.25, seed=2))
    regular = np.diff(arrival_offsets(20000, 2.0, burstiness=4.0, seed=2))
    assert bursty.mean() == pytest.approx(0.5, rel=0.06)
    assert regular.mean() == pytest.approx(0.5, rel=0.03)
    assert bursty.std() > 3 * regular.std()


def test_same_seed_same_schedule() -> None:
    assert arrival_offsets(50, 3.0, seed=7) == arrival_offsets(50, 3.0, seed=7)
    assert arrival_offsets(50, 3.0, seed=7) != arrival_offsets(50, 3.0, seed=8)


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0)])
def test_bad_parameters_are_refused(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        arrival_offsets(3, rate, burst)
