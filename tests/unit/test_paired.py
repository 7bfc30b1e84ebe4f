"""Ratios of two modes on the same prompts (gambit.bench.paired): `bench
--through-server`'s served/direct, the regime bench's adaptive/best fixed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gambit.bench.paired import PAYS_FROM, held_out_ratio, paired_ratio, prompt_regret


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


def test_held_out_best_is_the_mode_itself_when_it_is_the_best_everywhere() -> None:
    rates = {
        "adaptive": [30.0, 20.0, 25.0, 35.0],
        "fixed=8": [30.0, 20.0, 25.0, 35.0],  # the same rounds: the same rates
        "fixed=2": [20.0, 15.0, 18.0, 22.0],
    }
    assert held_out_ratio(rates, "adaptive", ["fixed=8", "fixed=2"]) == pytest.approx(1.0)
    pairs = zip(rates["adaptive"], rates["fixed=2"], strict=True)
    expected = math.exp(sum(math.log(a / b) for a, b in pairs) / 4)
    assert held_out_ratio(rates, "adaptive", ["fixed=2"]) == pytest.approx(expected)


def test_held_out_best_does_not_read_high_as_the_best_in_hindsight_does() -> None:
    """Eight fixed policies as good as adaptive, each measured with 5 % noise:
    the best of them in hindsight beats adaptive by the noise's largest draw;
    chosen on the other half of the prompts, it does not."""
    rng = np.random.default_rng(7)
    hindsight, held_out = [], []
    for _ in range(200):
        true = rng.uniform(20, 40, size=6)
        rates = {"adaptive": list(true * rng.lognormal(0, 0.05, 6))}
        rivals = [f"fixed={g}" for g in range(1, 9)]
        for r in rivals:
            rates[r] = list(true * rng.lognormal(0, 0.05, 6))
        best = max(rivals, key=lambda r: sum(rates[r]))
        hindsight.append(sum(rates["adaptive"]) / sum(rates[best]))
        held_out.append(held_out_ratio(rates, "adaptive", rivals))
    assert float(np.mean(hindsight)) < 0.98
    assert float(np.mean(held_out)) == pytest.approx(1.0, abs=0.01)


def test_held_out_needs_two_prompts_and_a_rival() -> None:
    assert held_out_ratio({"adaptive": [30.0], "fixed=4": [20.0]}, "adaptive", ["fixed=4"]) == 0.0
    assert held_out_ratio({"adaptive": [30.0, 20.0]}, "adaptive", []) == 0.0


def test_prompt_regret_holds_each_prompt_to_its_own_best_fixed_gamma_or_to_plain() -> None:
    # Prompt 1: fixed γ=8 pays 2.4x and adaptive makes 1.0x (the issue's
    # encyclopedia paragraph); prompt 2: γ=4 is that prompt's best; prompt 3:
    # no fixed γ pays PAYS_FROM, so adaptive is held to target-only there.
    rates = {
        "target-only": [10.0, 10.0, 10.0],
        "adaptive": [10.0, 19.0, 9.8],
        "fixed=4": [15.0, 20.0, 10.5],
        "fixed=8": [24.0, 18.0, 9.0],
    }
    rows = prompt_regret(rates, "adaptive", ["fixed=4", "fixed=8"], "target-only")
    assert [r["best_fixed"] for r in rows] == ["fixed=8", "fixed=4", "fixed=4"]
    assert rows[0]["vs_best_fixed"] == pytest.approx(10 / 24)
    assert rows[0]["judged"] == ("best fixed", pytest.approx(10 / 24))
    assert rows[1]["speedup"] == pytest.approx(1.9)
    assert rows[2]["best_fixed_speedup"] == pytest.approx(1.05)
    assert rows[2]["best_fixed_speedup"] < PAYS_FROM
    assert rows[2]["judged"] == ("target-only", pytest.approx(0.98))
    assert prompt_regret({"adaptive": [1.0]}, "adaptive", ["fixed=4"], "target-only") == []
