"""Choosing a round's source (draft model or prompt lookup), with fixed costs.

The costs are a CPU's: verifying k tokens costs 1 + 0.2 (k - 1) plain steps,
a draft-model step 0.3 of one, and reading a token the draft model skipped
0.05 of one. ``MODEL`` is the draft model's option; lookup's buckets are
priced ``FREE`` (``CombinedDrafter``): lookup drafts cost no draft step, only
that catch-up; the same copies checked by the draft model are priced
``READ``: it reads each in one batch.
"""

from __future__ import annotations

import pytest

from gambit.engine.drafters.base import Option, SourceKind
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.controller import GammaController
from gambit.engine.text.reply import Round

GAMMA_MAX = 8
MODEL = Option("draft model")
LONG_MATCH = Option("prompt lookup", 4, SourceKind.FREE)
SHORT_MATCH = Option("prompt lookup", 1, SourceKind.FREE)
LONG_CHECKED = Option("prompt lookup", 4, SourceKind.READ)
T1 = 0.010


def cpu_costs() -> CostModel:
    c = CostModel(GAMMA_MAX + 1)
    for k in range(1, GAMMA_MAX + 2):
        c.set_target(k, T1 * (1 + 0.2 * (k - 1)))
    c.t_draft = 0.3 * T1
    c.catch_up_ratio = 0.05
    return c


def controller(mode: str = "adaptive") -> GammaController:
    return GammaController(
        cpu_costs(),
        mode=mode,  # type: ignore[arg-type]
        gamma_max=GAMMA_MAX,
        fixed_gamma=4,
        option=MODEL,
    )


def learned(ctrl: GammaController, option: Option, alpha: float) -> None:
    """As if ``option``'s rounds had shown acceptance ``alpha`` many times."""
    ctrl.decide_gamma(option)
    ctrl.acceptance.alpha[:] = alpha
    ctrl.acceptance.seen[:] = 20
    ctrl.on = True


def spec_round(n_drafted: int, n_accepted: int, t_draft: float) -> Round:
    outcomes = (True,) * n_accepted + ((False,) if n_accepted < n_drafted else ())
    return Round(
        index=0, tokens=tuple(range(n_accepted + 1)), text="", gamma=n_drafted,
        n_drafted=n_drafted, n_accepted=n_accepted, outcomes=outcomes, t_draft_s=t_draft,
        t_verify_s=T1 * (1 + 0.2 * n_drafted), elapsed_s=0.0,
    )  # fmt: skip


def test_a_long_match_that_lands_is_chosen_over_the_draft_model() -> None:
    ctrl = controller()
    learned(ctrl, MODEL, 0.7)
    learned(ctrl, LONG_MATCH, 0.95)
    assert ctrl.choose((MODEL, LONG_MATCH)) == LONG_MATCH
    assert ctrl.choose((LONG_MATCH, MODEL)) == LONG_MATCH  # whatever the drafter prefers
    assert ctrl.decide_gamma(LONG_MATCH) == GAMMA_MAX


def test_a_short_match_that_misses_leaves_the_round_to_the_draft_model() -> None:
    ctrl = controller()
    learned(ctrl, MODEL, 0.7)
    learned(ctrl, SHORT_MATCH, 0.2)
    assert ctrl.choose((SHORT_MATCH, MODEL)) == MODEL
    assert ctrl.decide_gamma(MODEL) > 0


def test_equal_acceptance_goes_to_the_source_that_costs_no_draft_steps() -> None:
    ctrl = controller()
    learned(ctrl, MODEL, 0.8)
    learned(ctrl, LONG_MATCH, 0.8)
    assert ctrl.choose((MODEL, LONG_MATCH)) == LONG_MATCH
    ctrl.decide_gamma(LONG_MATCH)
    free = ctrl.decision.expected_speedup
    ctrl.decide_gamma(MODEL)
    assert free > ctrl.decision.expected_speedup > 1.0


def test_the_catch_up_a_lookup_round_leaves_is_priced() -> None:
    # Where reading the tokens lookup supplied costs as much as drafting them,
    # lookup has no edge left over the draft model at equal acceptance.
    ctrl = controller()
    ctrl.costs.catch_up_ratio = 0.3
    learned(ctrl, MODEL, 0.8)
    learned(ctrl, LONG_MATCH, 0.8)
    ctrl.decide_gamma(LONG_MATCH)
    free = ctrl.decision.expected_speedup
    ctrl.decide_gamma(MODEL)
    assert free == pytest.approx(ctrl.decision.expected_speedup, rel=0.05)


def test_an_option_never_drafted_for_is_tried_first() -> None:
    ctrl = controller()
    learned(ctrl, MODEL, 0.9)
    assert ctrl.choose((MODEL, SHORT_MATCH)) == SHORT_MATCH
    assert ctrl.decide_gamma(SHORT_MATCH) == ctrl.probe_gamma


def test_a_copy_that_landed_whole_once_is_chosen_again() -> None:
    # Draft steps of 0.08 of a plain step, the model landing 95 % over many
    # rounds. One copy of 8 that all landed reads ~0.9 a position (the
    # prior's outcomes pooled in), a little below the model's chain by the
    # estimate; had it been judged by the estimate alone it would never be
    # drafted again to show that copies land (a copy landing whole pays
    # ~1.3x the chain here). Each option is judged as optimistically as its
    # own evidence allows.
    ctrl = controller()
    ctrl.costs.t_draft = 0.08 * T1
    learned(ctrl, MODEL, 0.95)
    gamma = ctrl.decide_gamma(LONG_MATCH)
    ctrl.observe(spec_round(gamma, gamma, 0.00001))
    copy = ctrl.pricing.best(ctrl.learning.acceptance(LONG_MATCH), LONG_MATCH.kind)[2]
    chain = ctrl.pricing.best(ctrl.learning.acceptance(MODEL), MODEL.kind)[2]
    assert copy < chain  # (by the estimates alone, the chain)
    assert ctrl.choose((MODEL, LONG_MATCH)) == LONG_MATCH


def test_a_source_that_is_off_loses_to_one_that_pays() -> None:
    ctrl = controller()
    learned(ctrl, MODEL, 0.05)
    ctrl.observe(spec_round(1, 0, 0.3 * T1))  # any observation re-evaluates: off
    assert not ctrl.on
    learned(ctrl, LONG_MATCH, 0.6)
    assert ctrl.choose((MODEL, LONG_MATCH)) == LONG_MATCH


def test_lookup_rounds_leave_the_draft_step_cost_alone() -> None:
    ctrl = controller()
    learned(ctrl, LONG_MATCH, 0.9)
    before = ctrl.costs.t_draft
    gamma = ctrl.decide_gamma(LONG_MATCH)
    ctrl.observe(spec_round(gamma, gamma, 0.00001))  # a dictionary look-up: next to nothing
    assert ctrl.costs.t_draft == pytest.approx(before)


def test_fixed_policies_take_the_drafter_s_preference() -> None:
    ctrl = controller("fixed")
    learned(ctrl, MODEL, 0.9)
    learned(ctrl, SHORT_MATCH, 0.1)
    assert ctrl.choose((SHORT_MATCH, MODEL)) == SHORT_MATCH
    assert ctrl.choose((MODEL, LONG_MATCH)) == MODEL


def test_a_checked_copy_is_chosen_where_its_landing_pays_for_the_reading() -> None:
    # Copies that stray (α 0.5) against the same copies cut where the draft
    # model disagrees (α 0.95): reading 0.1 of a step per token pays for it.
    ctrl = controller()
    learned(ctrl, MODEL, 0.7)
    learned(ctrl, LONG_MATCH, 0.5)
    learned(ctrl, LONG_CHECKED, 0.95)
    assert ctrl.choose((LONG_MATCH, LONG_CHECKED, MODEL)) == LONG_CHECKED
    assert ctrl.decide_gamma(LONG_CHECKED) == GAMMA_MAX


def test_a_copy_that_lands_anyway_is_not_worth_reading_first() -> None:
    # Where the copy lands as often unchecked, the check's reading is waste:
    # reading a copy with every row's logits costs a little more than the
    # catch-up the draft model does later anyway (measured: 17 tokens in
    # 80.7 ms against 72.0 ms on an AMD EPYC, SmolLM2 Q4_1).
    ctrl = controller()
    ctrl.costs.read_ratio = 0.06
    learned(ctrl, MODEL, 0.7)
    learned(ctrl, LONG_MATCH, 0.95)
    learned(ctrl, LONG_CHECKED, 0.95)
    assert ctrl.choose((LONG_CHECKED, LONG_MATCH, MODEL)) == LONG_MATCH


def test_where_reading_costs_about_a_draft_step_checked_copies_are_no_option() -> None:
    # A CPU where the draft model reads a token for 0.7 of a draft step
    # (measured: Q4_1 SmolLM2, 2 cores): the check would cost what the
    # model's own chain does, so it is not tried, however well it lands.
    ctrl = controller()
    ctrl.costs.catch_up_ratio = 0.7 * ctrl.costs.draft_ratio
    assert not ctrl.pricing.reading_is_cheap()
    learned(ctrl, MODEL, 0.7)
    learned(ctrl, LONG_MATCH, 0.5)
    learned(ctrl, LONG_CHECKED, 0.99)
    assert ctrl.choose((LONG_CHECKED, LONG_MATCH, MODEL)) in (LONG_MATCH, MODEL)
    assert ctrl.choose((MODEL, LONG_CHECKED)) == MODEL
    # (the same for a fixed policy: the drafter's preference among the rest)
    assert controller("fixed").choose((LONG_CHECKED, LONG_MATCH, MODEL)) == LONG_CHECKED
    fixed = controller("fixed")
    fixed.costs.catch_up_ratio = 0.7 * fixed.costs.draft_ratio
    assert fixed.choose((LONG_CHECKED, LONG_MATCH, MODEL)) == LONG_MATCH


def test_a_checked_copy_is_priced_at_reading_its_tokens() -> None:
    # Reading a token for what a draft step costs: at equal acceptance a
    # checked copy is expected to pay what the model's own chain does.
    ctrl = controller()
    ctrl.costs.catch_up_ratio = ctrl.costs.draft_ratio
    learned(ctrl, MODEL, 0.9)
    learned(ctrl, LONG_CHECKED, 0.9)
    ctrl.decide_gamma(LONG_CHECKED)
    checked = ctrl.decision.expected_speedup
    ctrl.decide_gamma(MODEL)
    assert checked == pytest.approx(ctrl.decision.expected_speedup, rel=0.05)


def test_checked_copies_are_priced_at_their_own_measured_rate() -> None:
    # Reading a token for 0.05 of a step (a GPU): at equal acceptance the
    # checked copy beats the model's chain of 0.3-step draws...
    ctrl = controller()
    learned(ctrl, MODEL, 0.9)
    learned(ctrl, LONG_CHECKED, 0.9)
    assert ctrl.choose((MODEL, LONG_CHECKED)) == LONG_CHECKED
    # ...until checked rounds are timed at 0.4 of a step per token sent (the
    # model drafting on after strays): then they are no option at all.
    gamma = ctrl.decide_gamma(LONG_CHECKED)
    for _ in range(30):
        ctrl.observe(spec_round(gamma, gamma, 0.4 * T1 * gamma))
    assert ctrl.costs.read_ratio == pytest.approx(0.4, rel=0.05)
    assert not ctrl.pricing.reading_is_cheap()
    assert ctrl.choose((LONG_CHECKED, MODEL)) == MODEL
    learned(ctrl, LONG_CHECKED, 0.9)  # (the rounds above all landed: equal acceptance again)
    ctrl.decide_gamma(LONG_CHECKED)
    checked = ctrl.decision.expected_speedup
    ctrl.decide_gamma(MODEL)
    assert checked < ctrl.decision.expected_speedup


def test_reading_is_not_taken_for_cheap_before_it_is_measured() -> None:
    ctrl = controller()
    ctrl.costs.catch_up_ratio = 0.0  # no prompt read yet
    assert not ctrl.pricing.reading_is_cheap()


def test_checked_rounds_leave_the_draft_step_cost_alone_and_the_model_in_step() -> None:
    ctrl = controller()
    learned(ctrl, LONG_CHECKED, 0.9)
    before = ctrl.costs.t_draft
    gamma = ctrl.decide_gamma(LONG_CHECKED)
    ctrl.observe(spec_round(gamma, gamma, 3 * T1))  # one batch, not γ steps
    assert ctrl.costs.t_draft == pytest.approx(before)
    assert ctrl.probe_cost(0) == ctrl.probe_cost(ctrl.learning.behind)  # nothing left to read
