"""What a round's timings teach the cost model (CostModel.observe_drafting),
apart from the policy that reads it."""

from __future__ import annotations

import pytest

from gambit.engine.drafters.text_draft import per_round_seconds
from gambit.engine.estimates import COST_WEIGHT, CostModel

T1 = 0.010


def costs(draft_ratio: float = 0.0) -> CostModel:
    c = CostModel(4)
    for k in range(1, 5):
        c.set_target(k, T1 * (1 + 0.2 * (k - 1)))
    c.draft_ratio = draft_ratio
    return c


def test_steps_untimed_apart_count_the_catch_up_in() -> None:
    c = costs()
    c.observe_drafting(n_chain=4, t_draft_s=4 * 0.002, n_synced=1, t_synced_s=0.0)
    assert c.draft_ratio == pytest.approx(0.2)  # 2 ms a step, t1 10 ms
    assert c.catch_up_ratio == 0.0 and c.draft_extra_ratio == 0.0


def test_a_short_timed_catch_up_is_priced_beyond_its_one_step() -> None:
    c = costs(draft_ratio=0.1)  # 1 ms a step
    # 5 steps: the catch-up of 2 tokens took 1.6 ms, the 4 steps after it 4 ms
    c.observe_drafting(n_chain=5, t_draft_s=0.0056, n_synced=2, t_synced_s=0.0016)
    assert c.draft_ratio == pytest.approx(0.1)  # the steps after the catch-up: 1 ms each
    # the 0.6 ms beyond one step, in t1, folded in at the running weight
    assert c.draft_extra_ratio == pytest.approx(COST_WEIGHT * 0.0006 / T1)


def test_a_long_catch_up_after_plain_rounds_is_priced_apart() -> None:
    c = costs(draft_ratio=0.1)
    # 40 skipped tokens read in 20 ms (timed apart), then 4 steps in 4 ms
    c.observe_drafting(n_chain=4, t_draft_s=0.024, n_synced=40, t_synced_s=0.020)
    assert c.catch_up_ratio == pytest.approx(0.020 / 40 / T1)
    assert c.draft_ratio == pytest.approx(0.1)  # the steps' cost left as it was
    # untimed: the steps are taken at their known cost, the rest is catch-up
    c2 = costs(draft_ratio=0.1)
    c2.observe_drafting(n_chain=4, t_draft_s=0.024, n_synced=40, t_synced_s=0.0)
    assert c2.catch_up_ratio == pytest.approx((0.024 - 4 * 0.001) / 40 / T1)


@pytest.mark.parametrize("gamma", [2, 4, 16])
def test_the_fixed_part_of_a_text_draft_round_is_priced_per_round_not_per_token(gamma: int) -> None:
    # Drafting through text: each round pays 3 ms whatever its length (the
    # text synced, the held-back token written again, one token of lookahead,
    # the tokenizing), then 1.2 draft steps of 1 ms per target token.
    step, per_token, fixed = 0.001, 1.2, 0.003
    n_steps = round(gamma * per_token) + 1
    steps_s = n_steps * step
    total = fixed + steps_s
    split = per_round_seconds(total, steps_s, n_steps, gamma, per_token)
    c = costs(draft_ratio=0.12)  # the calibration's: 1.2 steps of 1 ms, t1 10 ms
    for _ in range(40):
        c.observe_drafting(n_chain=gamma, t_draft_s=total, n_synced=1, t_synced_s=split)
    # The same per-token price at every γ: a short draft does not look dearer
    # per token than a long one, and a round's whole cost is what it took.
    assert c.draft_ratio == pytest.approx(per_token * step / T1, rel=0.02)
    drafting = c.round_cost(gamma, gamma + 1) - c.verify_cost(gamma + 1)
    assert drafting == pytest.approx(total, rel=0.02)


def test_a_text_draft_round_of_one_token_or_no_steps_is_all_fixed() -> None:
    assert per_round_seconds(0.005, 0.002, 2, 1, 1.0) == 0.005  # one token proposed
    assert per_round_seconds(0.005, 0.0, 0, 0, 1.0) == 0.005  # no step after the catch-up
