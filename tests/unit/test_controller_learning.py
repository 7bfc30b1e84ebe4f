"""What the γ policy learns from rounds, on its own: no policy decides here.

Costs are a CPU's: verifying k tokens costs 1 + 0.2 (k - 1) plain steps of
10 ms, a draft-model step 0.3 of one, reading a skipped token 0.05 of one.
"""

from __future__ import annotations

import pytest

from gambit.engine.drafters.base import Option, SourceKind
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.controller_learning import RoundLearning
from gambit.engine.text.reply import Round, StopReason

T1 = 0.010


def cpu_costs() -> CostModel:
    c = CostModel(9)
    for k in range(1, 10):
        c.set_target(k, T1 * (1 + 0.2 * (k - 1)))
    c.t_draft = 0.3 * T1
    c.catch_up_ratio = 0.05
    return c


def opt(bucket: int, kind: SourceKind = SourceKind.MODEL) -> Option:
    """An option of a source priced as ``kind`` (its name does not matter here)."""
    return Option("source", bucket, kind)


def learning() -> RoundLearning:
    return RoundLearning(cpu_costs(), gamma_max=8, prior_alpha=0.6)


def a_round(
    n_drafted: int, n_accepted: int, t_draft: float = 0.0, stop: StopReason | None = None
) -> Round:
    outcomes = (True,) * n_accepted + ((False,) if n_accepted < n_drafted else ())
    return Round(
        index=0, tokens=tuple(range(n_accepted + 1)), text="", gamma=n_drafted,
        n_drafted=n_drafted, n_accepted=n_accepted, outcomes=outcomes, t_draft_s=t_draft,
        t_verify_s=T1 * (1 + 0.2 * n_drafted), elapsed_s=0.0, stop=stop,
    )  # fmt: skip


def test_each_option_learns_only_from_its_own_rounds() -> None:
    learned = learning()
    prior = learned.acceptance(opt(3)).estimate().copy()
    for _ in range(10):
        learned.observe(a_round(4, 0, 4 * 0.3 * T1), opt(5, SourceKind.MODEL))
    assert learned.acceptance(opt(5)).estimate()[0] < 0.2
    assert learned.acceptance(opt(3)).estimate() == pytest.approx(prior)
    assert learned.acceptance(opt(5)).seen[0] == 10
    assert not learned.acceptance(opt(3)).seen.any()


def test_a_model_round_times_draft_steps_and_leaves_the_model_in_step() -> None:
    learned = learning()
    learned.start_reply(n_context=40)
    assert learned.behind == 40
    for _ in range(40):
        learned.observe(a_round(4, 4, 4 * 0.5 * T1), opt(0, SourceKind.MODEL))
    assert learned.costs.draft_ratio == pytest.approx(0.5, rel=0.05)
    assert learned.behind == 0  # it drafted: it has read all but the round's own tokens


def test_a_free_round_costs_no_draft_step_and_leaves_the_model_behind() -> None:
    learned = learning()
    learned.start_reply(n_context=0)
    for _ in range(3):
        learned.observe(a_round(6, 5, 0.0001), opt(4, SourceKind.FREE))
    assert learned.costs.draft_ratio == pytest.approx(0.3)
    assert learned.costs.read_ratio == 0.0
    assert learned.behind == 3 * 6  # the draft model reads the copies later
    assert learned.acceptance(opt(4, SourceKind.FREE)).seen[0] == 3


def test_a_checked_copy_is_timed_per_token_read_not_per_draft_step() -> None:
    learned = learning()
    for _ in range(40):
        learned.observe(a_round(8, 8, 8 * 0.1 * T1), opt(4, SourceKind.READ))
    assert learned.costs.read_ratio == pytest.approx(0.1, rel=0.05)
    assert learned.costs.draft_ratio == pytest.approx(0.3)
    assert learned.behind == 0  # the model read the copy


def test_plain_rounds_leave_acceptance_alone_and_count_toward_the_lag() -> None:
    learned = learning()
    learned.start_reply(n_context=0)
    for _ in range(5):
        learned.observe(a_round(0, 0), opt(0, SourceKind.MODEL))
    assert not learned.acceptance(opt(0)).seen.any()
    assert learned.behind == 5


def test_reading_the_prompt_prices_the_catch_up_and_ends_the_lag() -> None:
    learned = learning()
    learned.start_reply(n_context=200)
    learned.observe_reading(200, 200 * 0.5 * T1)
    assert learned.behind == 0
    assert learned.costs.catch_up_ratio > 0.05  # moved toward 0.5 a token
    before = learned.costs.catch_up_ratio
    learned.observe_reading(2, 1.0)  # two tokens say nothing of a batch's rate
    assert learned.costs.catch_up_ratio == before


def test_reply_length_is_a_running_mean_of_replies_that_ended() -> None:
    learned = learning()
    assert learned.expected_reply_length() == RoundLearning.REPLY_PRIOR
    assert learned.expected_reply_length(horizon=100) == 100

    def reply(n_rounds: int, stop: StopReason) -> None:
        learned.start_reply(n_context=10)
        for i in range(n_rounds):
            last = i == n_rounds - 1
            learned.observe(a_round(3, 3, stop=stop if last else None), opt(0))

    reply(10, StopReason.EOG)  # 40 tokens
    assert learned.expected_reply_length() == 40
    reply(50, StopReason.CANCELLED)  # cut short by the user: says nothing
    assert learned.expected_reply_length() == 40
    reply(20, StopReason.MAX_TOKENS)  # 80 tokens
    expected = 40 + RoundLearning.REPLY_WEIGHT * 40
    assert learned.expected_reply_length() == pytest.approx(expected)
    assert learned.expected_reply_length(horizon=30) == 30


def test_side_gain_is_a_running_mean_per_side_node() -> None:
    learned = learning()
    assert learned.side_gain == RoundLearning.SIDE_GAIN_PRIOR
    tree = Round(
        index=0, tokens=(1, 2, 3), text="", gamma=3, n_drafted=5, n_accepted=2,
        outcomes=(True, True, False), main_outcomes=(True, False), n_side=2,
        t_draft_s=0.001, t_verify_s=0.02, elapsed_s=0.0,
    )  # fmt: skip
    for _ in range(60):
        learned.observe(tree, opt(0, SourceKind.MODEL))
    assert learned.side_gain == pytest.approx(0.5, abs=0.01)  # 1 token per 2 side nodes
