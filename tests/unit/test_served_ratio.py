"""The served/direct ratio of `bench --through-server`, prompt by prompt."""

from __future__ import annotations

import math

import pytest

from gambit.bench.served import paired_ratio


def test_equal_paths_read_one_with_no_width() -> None:
    assert paired_ratio([(50.0, 50.0), (40.0, 40.0), (60.0, 60.0)]) == (1.0, 1.0, 1.0)


def test_a_steady_cost_is_the_geometric_mean_and_noise_widens_the_interval() -> None:
    steady = paired_ratio([(50.0, 48.0), (40.0, 38.4), (60.0, 57.6)])
    assert steady is not None
    assert steady[0] == pytest.approx(0.96)
    assert steady[1] == pytest.approx(0.96) and steady[2] == pytest.approx(0.96)
    # Two pairs at 0.9 and 1.1: the mean is their geometric mean, the interval
    # (t with one degree of freedom: 12.71) spans far past both.
    noisy = paired_ratio([(50.0, 45.0), (50.0, 55.0)])
    assert noisy is not None
    mean, low, high = noisy
    assert mean == pytest.approx(math.sqrt(0.9 * 1.1))
    assert low < 0.5 < 2.0 < high


def test_too_few_pairs_or_failed_replies_give_no_interval() -> None:
    assert paired_ratio([(50.0, 48.0)]) is None
    # a reply that produced nothing on one path is left out, not divided by
    assert paired_ratio([(50.0, 0.0), (0.0, 40.0), (50.0, 48.0)]) is None
