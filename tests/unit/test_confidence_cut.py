"""Where a draft stops within a round: the draft's confidence, read as the
chance its tokens land as the rounds show it, against what a token costs.

Scripted rounds on a cost curve like the realistic pair's (a draft step 0.11
of a target step, each token in the batch 0.07 more): the rules the adaptive
policy's cut follows, and that a fixed γ drafts what it says.
"""

from __future__ import annotations

import math

import pytest
from test_controller_evidence import DRAFT, GAMMA_MAX, MODEL, SLOPE, T1, new_controller

from gambit.engine.drafters.base import ConfidenceCut, Option, SourceKind
from gambit.engine.estimates import LANDING_PRIOR, ConfidenceCalibration, CostModel
from gambit.engine.gamma.controller import GammaController
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.text.reply import Round


def drafted(cut: ConfidenceCut, confidence: list[float]) -> int:
    """How many of a chain with this confidence at each step the cut lets through."""
    n = 0
    for sure in confidence:
        if not cut.goes_on(sure):
            break
        n += 1
    return n


def test_the_cut_drafts_the_first_token_and_stops_at_the_one_below_the_floor() -> None:
    def as_is(sure: float) -> float:
        return sure

    # The first token is the policy's to judge: drafted however unsure.
    assert drafted(ConfidenceCut(0.5, as_is), [0.01, 0.9, 0.9, 0.9]) == 4  # 0.9 ** 3 > 0.5
    # After it, 0.9 * 0.6 = 0.54, then 0.54 * 0.8 = 0.43 < 0.5: that token's
    # chance of landing with the rest is below what it costs; not drafted.
    assert drafted(ConfidenceCut(0.5, as_is), [0.3, 0.9, 0.6, 0.8, 0.99, 0.99]) == 3
    # Once stopped, a surer token after it does not start the draft again.
    cut = ConfidenceCut(0.5, as_is)
    assert [cut.goes_on(s) for s in (0.3, 0.4, 0.99)] == [True, False, False]
    # A floor of 0 never cuts; nor does a floor above what the tokens say they
    # land, once the landing says they all land.
    assert drafted(ConfidenceCut(0.0, as_is), [0.1] * 16) == 16
    # Where a token costs more than a plain step (a toy pair's draft), the
    # first is still drafted: the round the policy asked for is not empty.
    assert drafted(ConfidenceCut(1.3, as_is), [0.99] * 16) == 1
    assert drafted(ConfidenceCut(0.5, lambda sure: 1.0), [0.1] * 16) == 16


def test_the_landing_is_learned_per_bucket_of_confidence_from_the_prior() -> None:
    calibration = ConfidenceCalibration()
    assert calibration.landing(0.1) == calibration.landing(0.99) == pytest.approx(LANDING_PRIOR)
    # A draft that is right when unsure (a draft of the target's own network)...
    for _ in range(40):
        calibration.observe((0.3, 0.3, 0.97), (True, True, False))
    assert calibration.landing(0.3) > 0.95  # (bucket 0.2-0.4)
    assert calibration.landing(0.97) < 0.1  # (bucket 0.95-1)
    assert calibration.landing(0.7) == pytest.approx(LANDING_PRIOR)  # (nothing seen there)
    # ... and positions after a rejection were never tried: no evidence.
    before = calibration.landing(0.5)
    calibration.observe((0.9, 0.5, 0.5), (False,))
    assert calibration.landing(0.5) == before


def test_the_adaptive_policy_cuts_at_what_a_token_costs_and_a_fixed_one_never() -> None:
    ctrl = new_controller()
    gamma = ctrl.decide_gamma(MODEL)
    assert gamma >= 2
    cut = ctrl.decided_cut()
    assert cut is not None
    # One more token: a draft step and its share of the larger batch, in
    # target steps, weighed by the rate the round is expected to make.
    expected = ctrl.decision.expected_speedup
    assert expected > 1.2
    assert cut.floor == pytest.approx((DRAFT + SLOPE) * math.sqrt(expected), rel=1e-6)
    # Each round gets its own (a cut keeps the chance so far).
    assert ctrl.decided_cut() is not cut
    assert FixedGamma(8).decided_cut() is None
    fixed = GammaController(ctrl.costs.copy(), mode="fixed", fixed_gamma=8, gamma_max=GAMMA_MAX)
    fixed.decide_gamma(MODEL)
    assert fixed.decided_cut() is None
    # A copy has no confidence; a chain of one has nothing after its first token.
    ctrl.decide_gamma(Option("prompt lookup", 4, SourceKind.FREE))
    assert ctrl.decided_cut() is None


def test_where_drafting_pays_well_a_token_must_beat_the_round_s_rate() -> None:
    """A token that lands 0.9 of the time with all before it pays against
    plain decoding (its cost is 0.18 of a step) but not against a round that
    makes twice plain decoding's rate: such a chain is cut shorter than γ."""
    ctrl = new_controller()
    for _ in range(6):  # (every draft landed: the policy expects drafting to pay well)
        g = ctrl.decide_gamma(MODEL)
        ctrl.observe(landed(g))
    assert ctrl.decide_gamma(MODEL) == GAMMA_MAX
    assert ctrl.decision.expected_speedup > 2.0
    cut = ctrl.decided_cut()
    assert cut is not None
    chance = ctrl.learning.landing(MODEL).landing(0.99)
    n = drafted(cut, [0.99] * GAMMA_MAX)
    # The tokens drafted were worth it at the rate the round makes ...
    assert chance ** (n - 1) >= (DRAFT + SLOPE) * math.sqrt(2.0)
    # ... and the first one not drafted would have been worth it against plain decoding.
    assert n < GAMMA_MAX and chance**n > DRAFT + SLOPE


def test_where_a_batch_costs_about_one_token_the_cut_goes_deeper() -> None:
    flat = CostModel(GAMMA_MAX + 1)
    for k in range(1, GAMMA_MAX + 2):
        flat.set_target(k, T1 * (1 + 0.005 * (k - 1)))  # (a GPU's batch)
    flat.t_draft = 0.02 * T1
    ctrl = GammaController(flat, gamma_max=GAMMA_MAX, option=MODEL)
    ctrl.start_reply(0)
    assert ctrl.decide_gamma(MODEL) >= 2
    gpu = ctrl.decided_cut()
    cpu_ctrl = new_controller()
    cpu_ctrl.decide_gamma(MODEL)
    cpu = cpu_ctrl.decided_cut()
    assert gpu is not None and cpu is not None
    assert gpu.floor < cpu.floor / 3


def test_the_policy_learns_how_its_draft_s_confidence_lands() -> None:
    ctrl = new_controller()
    landing = ctrl.learning.landing(MODEL)
    unsure = 0.3
    for _ in range(30):
        g = ctrl.decide_gamma(MODEL)
        # Every token the draft was unsure of landed; sure ones too.
        rnd = Round(
            index=0, tokens=tuple(range(g + 1)), text="", gamma=g, n_drafted=g,
            n_accepted=g, outcomes=(True,) * g, t_draft_s=(g * DRAFT + 0.1) * T1,
            t_verify_s=T1 * (1 + SLOPE * g), elapsed_s=0.0,
            confidence=(0.99,) + (unsure,) * (g - 1),
        )  # fmt: skip
        ctrl.observe(rnd)
    assert landing.landing(unsure) > 0.97
    # So a chain the draft is unsure of is not cut where such tokens land.
    ctrl.decide_gamma(MODEL)
    cut = ctrl.decided_cut()
    assert cut is not None
    assert drafted(cut, [0.99] + [unsure] * (GAMMA_MAX - 1)) >= 12
    # Where they stop landing, it is (each token's weight fades: ~50 of memory).
    for _ in range(80):
        g = ctrl.decide_gamma(MODEL)
        rnd = Round(
            index=0, tokens=(0, 1, 2), text="", gamma=g, n_drafted=g, n_accepted=1,
            outcomes=(True, False) if g > 1 else (True,), t_draft_s=(g * DRAFT + 0.1) * T1,
            t_verify_s=T1 * (1 + SLOPE * g), elapsed_s=0.0,
            confidence=(0.99,) + (unsure,) * (g - 1),
        )  # fmt: skip
        ctrl.observe(rnd)
    assert landing.landing(unsure) < 0.3
    if ctrl.decide_gamma(MODEL) >= 2:
        cut = ctrl.decided_cut()
        assert cut is not None
        assert drafted(cut, [0.99] + [unsure] * (GAMMA_MAX - 1)) <= 3


def test_the_reason_says_the_draft_stops_where_it_is_unsure() -> None:
    ctrl = new_controller()
    for _ in range(6):  # (past the first probe: on, drafting)
        g = ctrl.decide_gamma(MODEL)
        ctrl.observe(landed(g))
    g = ctrl.decide_gamma(MODEL)
    assert g >= 2 and not ctrl.decision.probing
    assert ctrl.decision.reason.startswith(f"on: drafting up to γ={g}, less where the draft is")


def landed(gamma: int) -> Round:
    """A round whose ``gamma`` drafts all landed."""
    return Round(
        index=0, tokens=tuple(range(gamma + 1)), text="", gamma=gamma, n_drafted=gamma,
        n_accepted=gamma, outcomes=(True,) * gamma, t_draft_s=(gamma * DRAFT + 0.1) * T1,
        t_verify_s=T1 * (1 + SLOPE * gamma), elapsed_s=0.0,
    )  # fmt: skip
