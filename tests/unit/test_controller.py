"""The γ policy, driven with synthetic acceptance and cost curves."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from gambit.engine.drafters.base import Option, SourceKind
from gambit.engine.estimates import (
    RETIME_WEIGHT,
    STALE_AFTER,
    AcceptanceModel,
    CostModel,
    chain_speedup,
)
from gambit.engine.gamma.controller import GammaController
from gambit.engine.gamma.controller_learning import RoundLearning
from gambit.engine.text.reply import Round

GAMMA_MAX = 8  # these tests' policy drafts at most 8 (the app's default: DEFAULT_GAMMA_MAX)


def controller(costs: CostModel, **kwargs: Any) -> GammaController:
    """A controller with at most GAMMA_MAX draft tokens, unless told otherwise."""
    kwargs.setdefault("gamma_max", GAMMA_MAX)
    return GammaController(costs, **kwargs)


def costs(
    per_k: list[float] | None = None, t1: float = 0.010, slope: float = 0.0, t_draft: float = 0.0
) -> CostModel:
    """t_target(k) = t1 * (1 + slope * (k - 1)) unless given; all sizes measured."""
    c = CostModel(GAMMA_MAX + 1)
    for k in range(1, GAMMA_MAX + 2):
        c.set_target(k, per_k[k - 1] if per_k else t1 * (1 + slope * (k - 1)))
    c.t_draft = t_draft
    return c


def with_alpha(ctrl: GammaController, alpha: float) -> GammaController:
    """As if ``alpha`` had been learned from many rounds."""
    ctrl.acceptance.alpha[:] = alpha
    ctrl.acceptance.seen[:] = 20
    return ctrl


def spec_round(n_drafted: int, n_accepted: int, t_draft: float, t_verify: float) -> Round:
    outcomes = (True,) * n_accepted + ((False,) if n_accepted < n_drafted else ())
    return Round(
        index=0, tokens=tuple(range(n_accepted + 1)), text="", gamma=n_drafted,
        n_drafted=n_drafted, n_accepted=n_accepted, outcomes=outcomes,
        t_draft_s=t_draft, t_verify_s=t_verify, elapsed_s=0.0,
    )  # fmt: skip


def plain_round(t_verify: float) -> Round:
    return spec_round(0, 0, 0.0, t_verify)


def test_expected_tokens_formula() -> None:
    acc = AcceptanceModel(4, prior=0.5)
    assert acc.expected_tokens(0) == 1.0
    assert acc.expected_tokens(1) == pytest.approx(1.5)
    assert acc.expected_tokens(3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    acc.alpha[:] = [1.0, 1.0, 0.0, 1.0]
    assert acc.expected_tokens(4) == pytest.approx(3.0)  # nothing past a certain rejection


def test_high_acceptance_cheap_verification_drafts_long() -> None:
    # GPU-like: a batch costs barely more than one token; a free drafter.
    ctrl = with_alpha(controller(costs(slope=0.02)), 0.9)
    gamma = ctrl.decide_gamma()
    assert gamma >= 6
    assert ctrl.decision.expected_speedup > 2.0
    assert ctrl.decision.reason.startswith("on:")


def test_low_acceptance_switches_off() -> None:
    ctrl = with_alpha(controller(costs(slope=0.2, t_draft=0.004)), 0.3)
    assert ctrl.decide_gamma() >= 1  # starts on (prior) for one round ...
    ctrl.observe(plain_round(0.010))  # ... any observation re-evaluates
    assert not ctrl.on
    assert ctrl.decide_gamma() == 0
    assert ctrl.decision.reason.startswith("off:")
    assert ctrl.decision.best_speedup < 1.0


def test_costly_verification_switches_off_even_with_good_drafts() -> None:
    # The measured CPU case: a 5-token batch costs ~2.8x one token, and the
    # draft model's step costs 60 % of a target token.
    ctrl = with_alpha(controller(costs(slope=0.45, t_draft=0.006)), 0.9)
    # The first reply re-measures the batch costs with one probe (the load-time
    # calibration may have been disturbed) ...
    probe = ctrl.decide_gamma()
    assert probe == ctrl.probe_gamma
    ctrl.observe(spec_round(probe, probe, 0.006 * probe, 0.010 * (1 + 0.45 * probe)))
    # ... which confirms them: off, and no more probes for PROBE_MAX tokens.
    for _ in range(GammaController.PROBE_MAX - 10):
        assert ctrl.decide_gamma() == 0
        ctrl.observe(plain_round(0.010))
    assert ctrl.decision.reason.startswith("off: cannot pay here")
    assert ctrl.decision.best_speedup < 1.0


def test_gamma_grows_with_acceptance() -> None:
    chosen = []
    for alpha in (0.5, 0.7, 0.85, 0.95):
        ctrl = with_alpha(controller(costs(slope=0.1, t_draft=0.001)), alpha)
        chosen.append(ctrl.decide_gamma())
    assert chosen == sorted(chosen)
    assert chosen[-1] > chosen[0]


def test_probes_while_off_and_recovers_when_text_turns_predictable() -> None:
    cheap = costs(slope=0.1, t_draft=0.001)
    cheap.catch_up_ratio = 0.001  # catching the drafter up is nearly free (a GPU)
    ctrl = with_alpha(controller(cheap), 0.05)
    ctrl.observe(plain_round(0.010))
    assert not ctrl.on
    # Plain rounds until a probe is due; failing probes cost at most the budget.
    intervals = []
    tokens = 0
    wasted = 0.0
    for _ in range(2000):
        gamma = ctrl.decide_gamma()
        if gamma:
            intervals.append(tokens)
            tokens = 0
            t_verify = 0.010 * (1 + 0.1 * gamma)
            ctrl.observe(spec_round(gamma, 0, 0.001 * gamma, t_verify))  # probe fails
            wasted += 0.001 * gamma + t_verify - 0.010
        else:
            tokens += 1
            ctrl.observe(plain_round(0.010))
    assert len(intervals) >= 10
    assert min(intervals[1:]) >= GammaController.PROBE_BASE
    assert wasted <= GammaController.PROBE_BUDGET * 2000 * 0.010 * 1.1
    # The text turns predictable: probes succeed, acceptance climbs, it switches on.
    for _ in range(1000):
        gamma = ctrl.decide_gamma()
        if gamma:
            ctrl.observe(spec_round(gamma, gamma, 0.001 * gamma, 0.012))
        else:
            ctrl.observe(plain_round(0.010))
        if ctrl.on:
            break
    assert ctrl.on
    # Drafts keep landing: γ grows past the probe's length.
    for _ in range(100):
        gamma = ctrl.decide_gamma()
        ctrl.observe(spec_round(gamma, gamma, 0.001 * gamma, 0.010 * (1 + 0.1 * gamma)))
    assert ctrl.decide_gamma() >= 5


def test_costly_catch_up_waits_for_the_start_of_a_reply() -> None:
    # A draft model that must re-read skipped text at 0.2 of a target token
    # each: a probe mid-reply would cost more than the budget allows ...
    slow = costs(slope=0.1, t_draft=0.004)
    slow.catch_up_ratio = 0.2
    ctrl = with_alpha(controller(slow), 0.1)
    ctrl.start_reply(300)
    ctrl.observe(plain_round(0.010))
    assert not ctrl.on
    probes = 0
    for _ in range(300):
        gamma = ctrl.decide_gamma()
        probes += gamma > 0
        ctrl.observe(spec_round(gamma, 0, 0.004 * gamma, 0.012) if gamma else plain_round(0.010))
    assert probes == 0
    # ... but at the start of the next reply it asks for the drafter to be
    # prepared during prompt processing, and then probes in the first round.
    ctrl.start_reply(300)
    assert ctrl.decide_reading()
    ctrl.observe_reading(300, 0.0)
    assert ctrl.decide_gamma() == ctrl.probe_gamma > 0


def test_a_few_successful_probes_switch_speculation_on() -> None:
    # The prior (0.6) says no in this compute-bound case; two probes whose
    # drafts all land must be enough to change its mind.
    ctrl = controller(costs(slope=0.3, t_draft=0.004))
    ctrl.start_reply(100)
    ctrl.observe_reading(100, 0.0)
    assert not ctrl.on
    for _ in range(2):
        gamma = ctrl.decide_gamma()
        assert gamma > 0
        ctrl.observe(spec_round(gamma, gamma, 0.004 * gamma, 0.010 * (1 + 0.3 * gamma)))
        ctrl._tokens_since_probe = GammaController.PROBE_MAX  # the next probe is due
    assert ctrl.on


def test_hysteresis_does_not_flap_near_break_even() -> None:
    # Expected speedup sits between the off (1.0) and on (1.05) thresholds:
    # the controller keeps whatever state it is in.
    ctrl = controller(costs(slope=0.0, t_draft=0.0))
    ctrl.acceptance.alpha[:] = 0.0
    ctrl.acceptance.alpha[0] = 0.03  # γ=1: E = 1.03 tokens for the same cost
    ctrl.observe(plain_round(0.010))
    assert ctrl.on
    ctrl.on = False
    ctrl.observe(plain_round(0.010))
    assert not ctrl.on


def test_fixed_and_off_modes() -> None:
    fixed = with_alpha(controller(costs(slope=0.45, t_draft=0.006), mode="fixed",
                                       fixed_gamma=4), 0.1)  # fmt: skip
    fixed.observe(plain_round(0.010))
    assert fixed.decide_gamma() == 4  # even when it loses
    assert fixed.decision.expected_speedup < 1.0
    off = with_alpha(controller(costs(slope=0.02), mode="off"), 0.99)
    assert off.decide_gamma() == 0
    assert off.decision.best_speedup > 2.0  # it knows what it is missing


def test_measurements_update_costs_and_acceptance() -> None:
    # A curve the observed t(5) = 1.5 t1 below fits without reordering sizes.
    c = costs(t1=0.010, slope=0.1)
    ctrl = controller(c)
    for _ in range(100):
        ctrl.observe(plain_round(0.020))  # the machine got slower
    assert c.verify_cost(1) == pytest.approx(0.020, rel=0.01)
    assert ctrl.baseline_tokens_per_s == pytest.approx(50, rel=0.01)
    for _ in range(100):
        ctrl.observe(spec_round(4, 1, 0.008, 0.030))
    alpha = ctrl.acceptance.alpha
    assert alpha[0] == pytest.approx(1.0, abs=0.01)
    assert alpha[1] == pytest.approx(0.0, abs=0.01)
    assert alpha[2] == pytest.approx(0.6)  # never tried: still the prior
    assert c.t_draft == pytest.approx(0.002, rel=0.01)
    assert c.verify_cost(5) == pytest.approx(0.030, rel=0.01)


def test_the_cost_curve_decisions_read_never_falls_with_batch_size() -> None:
    c = CostModel(17)
    for k, ratio in ((1, 1.0), (2, 1.2), (3, 1.4), (5, 1.4), (17, 3.0)):
        c.set_target(k, 0.100 * ratio)
    # A size never measured: its first round counts as much as the curve's
    # interpolated value (1.4 + 1.6 * 4/12 at k = 9), not outright.
    c.observe_verify(9, 0.100 * 2.5)
    assert c.verify_cost(9) == pytest.approx(0.100 * (1.4 + 1.6 * 4 / 12 + 2.5) / 2)
    # One cheap round at k = 12 after many dear ones at k = 11: a larger
    # batch never reads cheaper than a smaller one; the two are pooled,
    # weighted by the rounds behind each.
    for _ in range(9):
        c.observe_verify(11, 0.100 * 2.4)
    c.observe_verify(12, 0.100 * 1.0)
    costs_by_size = [c.verify_cost(k) for k in range(1, 18)]
    assert costs_by_size == sorted(costs_by_size)
    assert c.verify_cost(11) == pytest.approx(c.verify_cost(12))
    assert 0.100 * 2.0 < c.verify_cost(12) < 0.100 * 2.4
    assert c.verify_cost(1) == pytest.approx(0.100)  # t1 is what a plain step costs


def test_a_size_measured_long_ago_gives_way_to_the_sizes_measured_since() -> None:
    # As measured on the cost-scaled F32 target with a weaker draft: t(5)
    # read dear in early rounds; rounds now use k = 3 and k = 7 only, and
    # read t(7) below that old t(5).
    c = CostModel(9)
    for k, ratio in ((1, 1.0), (2, 1.4), (3, 1.5), (5, 2.2), (7, 2.3), (9, 2.6)):
        c.set_target(k, 0.100 * ratio)
    for _ in range(10):
        c.observe_verify(3, 0.100 * 1.3)
        c.observe_verify(7, 0.100 * 2.0)
    # Fresh enough: the fit pools t(5..7) (a larger batch never reads cheaper).
    assert c.verify_cost(5) == pytest.approx(c.verify_cost(7))
    assert c.verify_cost(5) > 0.100 * 2.0
    for _ in range(STALE_AFTER // 2):
        c.observe_verify(3, 0.100 * 1.3)
        c.observe_verify(7, 0.100 * 2.0)
    # t(5) is stale between two sizes measured since: interpolated from them.
    assert c.verify_cost(5) == pytest.approx((c.verify_cost(3) + c.verify_cost(7)) / 2)
    assert c.verify_cost(5) < 0.100 * 1.7
    # t(9), beyond the freshest size, is kept, but reads no dearer than the
    # line the fresh sizes make (through r(1) = 1, r(3) 1.3 and r(7) 2.0:
    # slope 0.165, 2.33 at 9); t(1) never goes stale.
    assert c.verify_cost(9) == pytest.approx(0.100 * 2.33, rel=0.01)
    assert c.verify_cost(1) == pytest.approx(0.100)
    # Measured again: averaged with what the decisions read, as a first round is.
    interpolated = c.verify_cost(5)
    c.observe_verify(5, 0.100 * 1.6)
    assert c.verify_cost(5) == pytest.approx((interpolated + 0.100 * 1.6) / 2)


# As an AVX-512 EPYC kept them for the cost-scaled pair (F32 ×4 + its Q4_1),
# where the next session's rounds read r(9) at 2.1-2.6.
KEPT_RATIOS = {
    2: 1.36, 3: 1.51, 4: 1.82, 5: 2.03, 6: 2.16, 7: 2.21, 8: 2.45, 9: 2.57,
    10: 2.84, 11: 3.56, 12: 3.68, 13: 3.94, 14: 4.25, 15: 4.77, 16: 4.54, 17: 5.12,
}  # fmt: skip


def test_sizes_kept_by_a_session_before_read_no_dearer_than_those_measured_now() -> None:
    # The policy drafted 8 from the kept curve and never timed a batch of 17
    # again: 0.90 of fixed γ = 16, where from a fresh calibration it drafted 13.
    kept = {"k_max": 17, "t1": 0.044, "ratio": {str(k): r for k, r in KEPT_RATIOS.items()},
            "draft_ratio": 0.169, "draft_extra_ratio": 0.096}  # fmt: skip
    c = CostModel.from_json({**kept, "ratio": {"1": 1.0, **kept["ratio"]}}, 17)
    assert c is not None

    def decided(costs: CostModel) -> int:
        ctrl = with_alpha(controller(costs.copy(), gamma_max=16), 0.99)
        return ctrl.decide_gamma()

    # Nothing measured yet in this session: the kept curve as it was.
    assert c.verify_cost(17) == pytest.approx(0.044 * 5.12)
    assert decided(c) < 12
    for _ in range(3):  # this session's rounds, 8 drafts each: t(9) reads 2.3
        c.observe_verify(9, 0.044 * 2.3)
    # r(10..17), kept, now read no dearer than the line through r(1) = 1 and
    # this session's r(9) (2.37 after three rounds): the policy drafts 16 and
    # times the batch, where before it went on drafting 8 (decided: 8).
    r9 = float(c.ratio[9])
    assert 2.3 < r9 < 2.57
    assert c.verify_cost(17) == pytest.approx(0.044 * (r9 + 8 * (r9 - 1) / 8))
    assert c.verify_cost(11) <= 0.044 * (r9 + 2 * (r9 - 1) / 8) + 1e-12
    assert decided(c) == 16
    # Timed again, a size is this session's own: as dear as it reads now.
    for _ in range(3):
        c.observe_verify(17, 0.044 * 4.6)
    assert c.verify_cost(17) > 0.044 * (r9 + 8 * (r9 - 1) / 8)
    # A kept size below this session's line stays as it was.
    low = CostModel.from_json({**kept, "ratio": {"1": 1.0, "9": 2.57, "17": 3.0}}, 17)
    assert low is not None
    low.observe_verify(9, 0.044 * 2.3)
    assert low.verify_cost(17) == pytest.approx(0.044 * 3.0)


def test_a_plain_step_re_timed_after_a_reply_moves_t1_part_of_the_way() -> None:
    # Re-timed medians after replies read 57-73 ms for one 68 ms step (F32 ×4):
    # t1 follows them as a running mean, the relative curve as it was.
    c = costs(t1=0.068, slope=0.2, t_draft=0.008)
    relative, draft = c.relative_costs(9)
    c.observe_plain_step(0.057)  # one fast reading
    assert c.t1 == pytest.approx(0.068 + RETIME_WEIGHT * (0.057 - 0.068))
    assert 0.057 < c.t1 < 0.068
    assert np.array_equal(c.relative_costs(9)[0], relative)
    assert c.relative_costs(9)[1] == draft
    c.observe_plain_step(0.0)  # nothing timed: nothing moves
    assert c.t1 == pytest.approx(0.068 + RETIME_WEIGHT * (0.057 - 0.068))
    for _ in range(10):  # the context grew: a steady change is followed
        c.observe_plain_step(0.080)
    assert c.t1 == pytest.approx(0.080, rel=0.03)
    fresh = CostModel(9)  # nothing measured before: the first re-timing is t1
    fresh.observe_plain_step(0.050)
    assert fresh.t1 == 0.050


def test_plain_rounds_leave_the_relative_costs_as_they_were() -> None:
    # The speedups a round that is off asks for are cached under curve_key:
    # plain rounds move t1 only, and must not make them stale.
    c = costs(t1=0.010, slope=0.2, t_draft=0.004)
    key, relative = c.curve_key(), c.relative_costs(9)
    for seconds in (0.012, 0.015, 0.011):
        c.observe_verify(1, seconds)
    assert c.verify_cost(1) != 0.010
    assert c.curve_key() == key
    assert np.array_equal(c.relative_costs(9)[0], relative[0])
    c.observe_verify(5, 0.030)  # a verification round does change them
    assert c.curve_key() != key


def test_unmeasured_batch_sizes_are_interpolated() -> None:
    c = CostModel(9)
    c.set_target(1, 0.010)
    c.set_target(5, 0.018)
    assert c.verify_cost(3) == pytest.approx(0.014)
    assert c.verify_cost(9) == pytest.approx(0.018 * 9 / 5)
    empty = CostModel(9)
    assert empty.verify_cost(4) == 4.0
    assert np.isfinite(controller(empty).decision.best_speedup)


# ------------------------------------------------------------------ token trees


def tree_costs(slope: float, t_draft: float = 0.0, k_max: int = 13) -> CostModel:
    c = CostModel(k_max)
    for k in range(1, k_max + 1):
        c.set_target(k, 0.010 * (1 + slope * (k - 1)))
    c.t_draft = t_draft
    return c


def tree_round(
    gamma: int, n_side: int, chain_accepted: int, side_gain: int, slope: float = 0.005
) -> Round:
    """A tree round: the main chain accepted ``chain_accepted`` of γ, side nodes
    added ``side_gain``; verification timed as ``tree_costs(slope)`` says."""
    chain = (True,) * chain_accepted + ((False,) if chain_accepted < gamma else ())
    n_accepted = chain_accepted + side_gain
    return Round(
        index=0, tokens=tuple(range(n_accepted + 1)), text="", gamma=gamma,
        n_drafted=gamma + n_side, n_accepted=n_accepted,
        outcomes=(True,) * n_accepted + ((False,) if n_accepted < gamma else ()),
        t_draft_s=0.0, t_verify_s=0.010 * (1 + slope * (gamma + n_side)), elapsed_s=0.0,
        n_side=n_side, main_outcomes=chain,
    )  # fmt: skip


def test_cheap_batches_buy_side_nodes_within_the_node_budget() -> None:
    # GPU-like: a batch of 12 costs 5 % more than one token.
    ctrl = with_alpha(controller(tree_costs(slope=0.005), side_max=7, node_max=8), 0.7)
    ctrl.learning.side_gain = 0.3
    gamma = ctrl.decide_gamma()
    side = ctrl.decided_side_nodes()
    assert gamma >= 1 and side >= 1
    assert gamma + side <= 8
    assert ctrl.decision.side == side


def test_costly_batches_keep_chains() -> None:
    # This machine's CPU: every extra token in the batch costs ~45 % of a token.
    ctrl = with_alpha(controller(tree_costs(slope=0.45), side_max=7, node_max=8), 0.8)
    ctrl.learning.side_gain = 0.3
    assert ctrl.decide_gamma() >= 1
    assert ctrl.decided_side_nodes() == 0


def test_side_gain_is_learned_from_tree_rounds() -> None:
    ctrl = controller(tree_costs(slope=0.005), side_max=7, node_max=8)
    assert ctrl.learning.side_gain == RoundLearning.SIDE_GAIN_PRIOR
    for _ in range(40):
        ctrl.observe(tree_round(gamma=3, n_side=2, chain_accepted=1, side_gain=1))
    assert ctrl.learning.side_gain == pytest.approx(0.5, abs=0.01)  # 1 token per 2 side nodes
    for _ in range(40):
        ctrl.observe(tree_round(gamma=3, n_side=4, chain_accepted=1, side_gain=0))
    assert ctrl.learning.side_gain < 0.01
    # The chain's own acceptance saw only the main chain: 1 of 2 positions each time.
    assert ctrl.acceptance.alpha[0] > 0.95 and ctrl.acceptance.alpha[1] < 0.05
    assert ctrl.acceptance.estimate()[1] < 0.15  # (shrunk a little towards the pool)
    assert ctrl.decide_gamma() >= 1
    assert ctrl.decided_side_nodes() == 0  # side nodes that never win are not bought


def test_fixed_tree_shape() -> None:
    ctrl = controller(
        tree_costs(slope=0.45), mode="fixed", fixed_gamma=3, side_max=7, fixed_side=2, node_max=8
    )
    assert (ctrl.decide_gamma(), ctrl.decided_side_nodes()) == (3, 2)
    assert "3 + 2 side" in ctrl.decision.reason


def test_draft_cost_counts_only_the_chain() -> None:
    """Side nodes cost the drafter no decode: t_draft is per main-chain token."""
    ctrl = controller(tree_costs(slope=0.1), side_max=4, node_max=8)
    rnd = tree_round(gamma=2, n_side=3, chain_accepted=2, side_gain=0, slope=0.1)
    ctrl.observe(dataclasses.replace(rnd, t_draft_s=0.008))
    assert ctrl.costs.t_draft == pytest.approx(0.004)


def test_each_option_learns_its_own_acceptance() -> None:
    # Compute-bound costs, a free drafter (prompt lookup): drafts after short
    # matches (bucket 1) fail, drafts inside long copied stretches (bucket 4) land.
    ctrl = controller(costs(slope=0.3))
    for _ in range(30):
        gamma = ctrl.decide_gamma(Option("prompt lookup", 1))
        if gamma:
            ctrl.observe(spec_round(gamma, 0, 0.0, 0.010 * (1 + 0.3 * gamma)))
        else:
            ctrl.observe(plain_round(0.010))
    ctrl.decide_gamma(Option("prompt lookup", 1))  # (off, or one of its probes)
    assert not ctrl.on
    # The first round of a new option is a probe, whatever the budget says ...
    probe = ctrl.decide_gamma(Option("prompt lookup", 4))
    assert probe == ctrl.probe_gamma > 0
    ctrl.observe(spec_round(probe, probe, 0.0, 0.010 * (1 + 0.3 * probe)))
    # ... and what it learns switches speculation on for that option only.
    assert ctrl.decide_gamma(Option("prompt lookup", 4)) >= 4
    assert ctrl.decision.reason.startswith("on:")
    ctrl.decide_gamma(Option("prompt lookup", 1))
    assert not ctrl.on
    assert ctrl.acceptance.alpha[0] < 0.5


def test_speedups_are_kept_until_what_they_depend_on_changes() -> None:
    costs = CostModel(9)
    for k, seconds in [(1, 0.010), (2, 0.014), (5, 0.030), (9, 0.050)]:
        costs.set_target(k, seconds)
    costs.t_draft = 0.004
    ctl = controller(costs, mode="adaptive", gamma_max=8)
    ceiling = ctl.ceiling_speedup()
    costs.observe_verify(1, 0.013)  # a plain round moves t1; ratios of costs do not
    assert ctl.ceiling_speedup() == ceiling
    costs.set_target(5, 0.013 * 1.1)  # a flatter batch curve: more to gain
    flatter = ctl.ceiling_speedup()
    assert flatter > ceiling
    costs.draft_ratio = 0.0  # set directly (the layer-skip search does): still seen
    assert ctl.ceiling_speedup() > flatter
    before = ctl._best()
    ctl.acceptance.observe((False,))  # α changes: so may the best γ's speedup
    assert ctl._best()[2] < before[2]


def f32_like_costs() -> CostModel:
    """Measured mid-reply on F32 + Q4_1 here: t(k)/t1 1.42 (k=2), 1.88 (5),
    2.56 (9), a draft step 0.49 t1; drafts of 8 pay 1.18x at α = 0.95."""
    ratios = {1: 1.0, 2: 1.42, 3: 1.59, 5: 1.88, 9: 2.56}
    ks = sorted(ratios)
    per_k = [0.0175 * float(np.interp(k, ks, [ratios[x] for x in ks])) for k in range(1, 10)]
    return costs(per_k, t_draft=0.49 * 0.0175)


def test_two_early_rejections_do_not_switch_a_paying_draft_off() -> None:
    c = f32_like_costs()
    ctrl = controller(c)
    t1 = c.verify_cost(1)

    def run(gamma: int, accepted: int) -> None:
        t_verify = c.verify_cost(gamma + 1)
        ctrl.observe(spec_round(gamma, accepted, gamma * 0.49 * t1, t_verify))

    gamma = ctrl.decide_gamma()  # never tried: a probe
    run(gamma, gamma)
    for _ in range(4):
        gamma = ctrl.decide_gamma()
        run(gamma, gamma)
    assert ctrl.on
    # Two rejections at the first position in a row: 2 in 7 is what its own
    # outcomes say (α_1 ≈ 0.71, where drafting barely pays), but 7 rounds say little.
    for _ in range(2):
        run(ctrl.decide_gamma(), 0)
    assert ctrl.acceptance.alpha[0] == pytest.approx(0.71, abs=0.01)
    assert float(ctrl.pricing.speedups(ctrl.acceptance.alpha, SourceKind.MODEL).max()) < 1.05
    assert ctrl.on
    assert ctrl.decide_gamma() > 0


def test_steady_rejections_still_switch_off_within_a_few_rounds() -> None:
    c = f32_like_costs()
    ctrl = controller(c)
    t1 = c.verify_cost(1)
    for _ in range(6):  # predictable text: on
        gamma = ctrl.decide_gamma()
        ctrl.observe(spec_round(gamma, gamma, gamma * 0.49 * t1, c.verify_cost(gamma + 1)))
    assert ctrl.on
    rounds = 0
    while ctrl.on:  # then nothing lands
        gamma = ctrl.decide_gamma()
        ctrl.observe(spec_round(gamma, 0, gamma * 0.49 * t1, c.verify_cost(gamma + 1)))
        rounds += 1
        assert rounds < 8


def test_a_draft_step_is_priced_without_the_rounds_catch_up() -> None:
    c = costs(t1=0.010, slope=0.2, t_draft=0.004)
    ctrl = controller(c)
    catch_up = dict(n_draft_synced=2, t_draft_synced_s=0.007)
    # 4 drafts: a 2-token catch-up of 7 ms, then 3 steps of 5 ms.
    ctrl.observe(dataclasses.replace(spec_round(4, 4, 0.022, 0.016), **catch_up))
    assert c.t_draft == pytest.approx(0.004 + 0.5 * (0.005 - 0.004))  # the 2nd sample weighs 1/2
    # γ = 1: only the catch-up, which says nothing about a step.
    before = c.t_draft
    ctrl.observe(dataclasses.replace(spec_round(1, 1, 0.007, 0.012), **catch_up))
    assert c.t_draft == before
    # A long catch-up after plain rounds is priced apart, at what it took.
    long = dict(n_draft_synced=40, t_draft_synced_s=0.080)
    ctrl.observe(dataclasses.replace(spec_round(4, 4, 0.095, 0.016), **long))
    assert c.catch_up_ratio == pytest.approx(0.080 / 40 / c.t1)


def test_the_catch_up_beyond_a_step_is_priced_per_round() -> None:
    c = costs(t1=0.010, slope=0.2, t_draft=0.004)
    ctrl = controller(c)
    # Rounds whose 2-token catch-up takes 7 ms where a step takes 4 ms.
    for _ in range(60):
        rnd = spec_round(4, 4, 0.007 + 3 * 0.004, 0.018)
        ctrl.observe(dataclasses.replace(rnd, n_draft_synced=2, t_draft_synced_s=0.007))
    assert c.t_draft == pytest.approx(0.004)
    assert c.round_cost(4, 5) - c.verify_cost(5) - 4 * c.t_draft == pytest.approx(0.003, rel=0.01)
    # A round of γ = 4 is priced at what it takes: 19 ms of drafting.
    expected_cost = ctrl.acceptance.expected_tokens(4) / ctrl.pricing.expected_rate(
        ctrl.acceptance, 4
    )
    assert expected_cost == pytest.approx(0.019 + c.verify_cost(5), rel=0.01)


@pytest.mark.parametrize("alpha", [0.0, 0.35, 0.8, 1.0])
@pytest.mark.parametrize(("slope", "t_draft"), [(0.0, 0.0), (0.15, 0.001), (0.6, 0.004)])
def test_chain_speedup_is_the_controller_s_model_with_one_acceptance(
    alpha: float, slope: float, t_draft: float
) -> None:
    """The what-if estimate of a draft not yet made (estimates.chain_speedup,
    used by the draft searches) is the controller's own arithmetic, before it
    has learned anything."""
    c = costs(slope=slope, t_draft=t_draft)
    ctrl = controller(c.copy(), prior_alpha=alpha)
    for gamma in range(1, GAMMA_MAX + 1):
        assert chain_speedup(c, alpha, gamma) == pytest.approx(
            ctrl.pricing.expected_speedup(ctrl.acceptance, gamma)
        )
