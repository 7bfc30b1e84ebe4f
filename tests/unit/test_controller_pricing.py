"""What a round is expected to pay, priced from fixed costs: no policy, no learning.

Verifying k tokens costs 1 + 0.2 (k - 1) plain steps, a draft-model step
0.3 of one, reading a skipped token 0.05 of one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gambit.engine.estimates import CostModel
from gambit.engine.gamma.controller_learning import RoundLearning, SourceKind
from gambit.engine.gamma.controller_pricing import RoundPricing

T1 = 0.010
GAMMA_MAX = 8


def verify(k: int) -> float:
    """t_target(k) / t1."""
    return 1 + 0.2 * (k - 1)


def pricing(side_max: int = 0, node_max: int | None = None) -> RoundPricing:
    c = CostModel(GAMMA_MAX + side_max + 1)
    for k in range(1, GAMMA_MAX + side_max + 2):
        c.set_target(k, T1 * verify(k))
    c.t_draft = 0.3 * T1
    c.catch_up_ratio = 0.05
    learned = RoundLearning(c, GAMMA_MAX)
    return RoundPricing(learned, GAMMA_MAX, side_max, node_max or GAMMA_MAX + side_max)


def tokens(alpha: float, gamma: int) -> float:
    return 1 + sum(alpha**i for i in range(1, gamma + 1))


def test_a_draft_model_chain_pays_its_steps_and_the_batch() -> None:
    p = pricing()
    speedups = p.speedups(np.full(GAMMA_MAX, 0.8), SourceKind.MODEL)
    for gamma in (1, 4, 8):
        expected = tokens(0.8, gamma) / (gamma * 0.3 + verify(gamma + 1))
        assert speedups[gamma - 1, 0] == pytest.approx(expected)


def test_a_free_copy_pays_only_the_batch_and_the_model_reading_it_later() -> None:
    p = pricing()
    speedups = p.speedups(np.full(GAMMA_MAX, 0.8), SourceKind.FREE)
    for gamma in (1, 4, 8):
        n = tokens(0.8, gamma)
        assert speedups[gamma - 1, 0] == pytest.approx(n / (verify(gamma + 1) + n * 0.05))
    model = p.speedups(np.full(GAMMA_MAX, 0.8), SourceKind.MODEL)
    assert (speedups > model).all()  # at equal acceptance, free beats 0.3-step draws


def test_a_checked_copy_pays_reading_what_it_sends() -> None:
    p = pricing()
    speedups = p.speedups(np.full(GAMMA_MAX, 0.8), SourceKind.READ)
    read = 0.05  # (the prompts' rate: no checked round measured yet)
    for gamma in (1, 4, 8):
        expected = tokens(0.8, gamma) / (verify(gamma + 1) + gamma * read)
        assert speedups[gamma - 1, 0] == pytest.approx(expected)
    p.learned.costs.read_ratio = 0.3  # measured: as dear as a draft step
    same = p.speedups(np.full(GAMMA_MAX, 0.8), SourceKind.READ)
    assert same == pytest.approx(p.speedups(np.full(GAMMA_MAX, 0.8), SourceKind.MODEL))


def test_side_nodes_add_their_gain_within_the_node_budget() -> None:
    p = pricing(side_max=4, node_max=8)
    p.learned.side_gain = 0.5
    speedups = p.speedups(np.full(GAMMA_MAX, 0.7), SourceKind.MODEL)
    assert speedups.shape == (GAMMA_MAX, 5)
    expected = (tokens(0.7, 3) + 2 * 0.5) / (3 * 0.3 + verify(3 + 1 + 2))
    assert speedups[2, 2] == pytest.approx(expected)
    assert speedups[7, 1] == -np.inf  # 8 + 1 nodes: over the budget
    assert np.isfinite(speedups[3, 4])  # 4 + 4: within it


def test_best_and_ceiling_and_probe_read_the_same_prices() -> None:
    p = pricing()
    acc = p.learned.acceptance(0)
    acc.alpha[:] = 0.9
    acc.seen[:] = 20
    gamma, side, best = p.best(acc, SourceKind.MODEL)
    assert side == 0
    assert best == pytest.approx(float(p.speedups(acc.estimate(), SourceKind.MODEL).max()))
    assert gamma == int(np.argmax(p.speedups(acc.estimate(), SourceKind.MODEL)[:, 0])) + 1
    assert p.ceiling(SourceKind.MODEL) > best
    ones = p.speedups(np.ones(GAMMA_MAX), SourceKind.MODEL)[:, 0]
    assert p.probe_gamma(SourceKind.MODEL) == int(np.argmax(ones)) + 1
    # A probe that fails wastes its draft and the larger batch, plus the catch-up.
    g = p.probe_gamma(SourceKind.MODEL)
    wasted = (g * 0.3 + verify(g + 1) - 1) * T1
    assert p.probe_cost(SourceKind.MODEL) == pytest.approx(wasted)
    catch_up = p.learned.costs.catch_up_cost(RoundPricing.CATCH_UP_MAX)
    assert p.probe_cost(SourceKind.MODEL, 10_000) == pytest.approx(wasted + catch_up)


def test_expected_speedup_is_the_rate_against_plain_decoding() -> None:
    p = pricing()
    acc = p.learned.acceptance(0)
    assert p.expected_speedup(acc, 0) == pytest.approx(1.0)
    rate = p.expected_rate(acc, 4)
    assert rate == pytest.approx(tokens(0.6, 4) / ((4 * 0.3 + verify(5)) * T1))
    assert p.expected_speedup(acc, 4) == pytest.approx(rate * T1)
    assert p.baseline_tokens_per_s == pytest.approx(1 / T1)


def test_reading_is_cheap_only_well_under_a_draft_step_and_once_measured() -> None:
    p = pricing()
    costs = p.learned.costs
    assert p.reading_is_cheap()  # 0.05 of a step against 0.3: a GPU's
    costs.catch_up_ratio = 0.2  # two thirds of a draft step: a CPU's
    assert not p.reading_is_cheap()
    costs.read_ratio = 0.02  # checked rounds measured cheap: their rate decides
    assert p.reading_is_cheap()
    costs.read_ratio = costs.catch_up_ratio = 0.0  # nothing read yet
    assert not p.reading_is_cheap()


def test_pricing_changes_nothing_it_prices_with() -> None:
    p = pricing(side_max=3)
    acc = p.learned.acceptance(0)
    before = (json.dumps(p.learned.costs.to_json()), acc.alpha.copy(), acc.seen.copy())
    for kind in SourceKind:
        p.speedups(acc.estimate(), kind)
        p.best(acc, kind)
        p.ceiling(kind)
        p.probe_cost(kind, 50)
    p.expected_speedup(acc, 3, 2)
    p.reading_is_cheap()
    after = (json.dumps(p.learned.costs.to_json()), acc.alpha, acc.seen)
    assert before[0] == after[0]
    assert (before[1] == after[1]).all() and (before[2] == after[2]).all()
    assert p.learned.side_gain == RoundLearning.SIDE_GAIN_PRIOR
