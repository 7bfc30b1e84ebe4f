"""What the controller says it will do and why, for given costs and acceptance.

One draft position (γ_max = 1) keeps the arithmetic visible: verifying two
tokens costs 1.5 plain steps and the drafter is free, so with acceptance α
the expected speedup is (1 + α) / 1.5.
"""

from __future__ import annotations

import pytest

from gambit.engine.estimates import CostModel
from gambit.engine.gamma import controller_wording as wording
from gambit.engine.gamma.controller import GammaController
from gambit.engine.gamma.policy import PolicyMode
from gambit.engine.text.reply import Round

T1 = 0.010
NEED = f"{(GammaController.ON_ABOVE - 1) * 100:.0f} %"  # the gain needed to switch on


def costs(t2_ratio: float = 1.5, draft_ratio: float = 0.0) -> CostModel:
    c = CostModel(2)
    c.set_target(1, T1)
    c.set_target(2, T1 * t2_ratio)
    c.draft_ratio = draft_ratio
    return c


def controller(
    alpha: float, mode: PolicyMode = "adaptive", t2_ratio: float = 1.5, draft_ratio: float = 0.0
) -> GammaController:
    ctrl = GammaController(
        costs(t2_ratio, draft_ratio), mode=mode, gamma_max=1, fixed_gamma=1, prior_alpha=alpha
    )
    ctrl.acceptance.alpha[:] = alpha
    return ctrl


def probe(accepted: bool) -> Round:
    return Round(
        index=0, tokens=(7, 8) if accepted else (7,), text="", gamma=1, n_drafted=1,
        n_accepted=int(accepted), outcomes=(accepted,), t_draft_s=0.0, t_verify_s=1.5 * T1,
        elapsed_s=0.0,
    )  # fmt: skip


def ctrl_round(ctrl: GammaController, t2_ratio: float, draft_ratio: float) -> Round:
    """A round of γ = 1 whose draft was rejected, at the given costs."""
    return Round(
        index=0, tokens=(7,), text="", gamma=1, n_drafted=1, n_accepted=0,
        outcomes=(False,), t_draft_s=draft_ratio * T1, t_verify_s=t2_ratio * T1, elapsed_s=0.0,
    )  # fmt: skip


def off_after_a_probe(alpha: float) -> GammaController:
    """A controller that just probed and stayed off, then holds acceptance
    ``alpha``, as if learned from many rounds (the prior no longer counts)."""
    ctrl = controller(0.3)
    ctrl.on = False
    assert ctrl.decide_gamma() == 1  # the first probe comes at once
    ctrl.observe(probe(accepted=False))
    assert not ctrl.on
    ctrl.acceptance.alpha[:] = alpha
    ctrl.acceptance.seen[:] = 20
    return ctrl


def test_off_within_the_hysteresis_shows_the_threshold() -> None:
    ctrl = off_after_a_probe(0.5415)  # (1 + 0.5415) / 1.5 = 1.028, less the pooled prior: 1.02
    assert ctrl.decide_gamma() == 0
    assert ctrl.decision.reason == (
        f"off: a draft would gain 2 %, below the {NEED} needed to switch on"
    )


def test_off_when_a_draft_would_lose() -> None:
    ctrl = off_after_a_probe(0.35)  # 0.90x
    assert ctrl.decide_gamma() == 0
    assert ctrl.decision.reason == (
        f"off: a draft would lose 10 % (expected 0.90x); on once it would gain more than {NEED}"
    )


def test_on_says_what_it_drafts_and_when_it_stops() -> None:
    ctrl = controller(0.8)
    ctrl.decide_gamma()
    ctrl.observe(probe(accepted=True))  # measured once: no longer the prior alone
    ctrl.acceptance.alpha[:] = 0.8  # (1 + 0.8) / 1.5 = 1.2
    assert ctrl.on
    assert ctrl.decide_gamma() == 1
    assert ctrl.decision.reason == "on: drafting γ=1, expected 1.20x; off if that falls below 1.00x"


def test_probing_says_why() -> None:
    ctrl = controller(0.35)
    ctrl.on = False
    assert ctrl.decide_gamma() == 1
    assert ctrl.decision.reason == (
        f"probing: trying γ=1 to re-measure acceptance (on if a draft would gain more than {NEED})"
    )


@pytest.mark.parametrize(
    ("t2_ratio", "draft_ratio", "outcome"),
    [
        (
            2.0,
            0.4,
            "cannot pay here: even if every draft were accepted, γ=1 would reach only 0.83x",
        ),
        (
            1.75,
            0.0,
            "little to gain here: even if every draft were accepted, γ=1 would gain only 14 %",
        ),
    ],
)
def test_cannot_pay_says_what_costs_too_much(
    t2_ratio: float, draft_ratio: float, outcome: str
) -> None:
    ctrl = controller(0.9, t2_ratio=t2_ratio, draft_ratio=draft_ratio)
    ctrl.on = False
    ctrl.decide_gamma()  # the first reply's probe re-measures the costs
    ctrl.observe(ctrl_round(ctrl, t2_ratio, draft_ratio))
    assert ctrl.decide_gamma() == 0
    costs = f"verifying 2 tokens costs {t2_ratio:.2f} plain steps"
    if draft_ratio:
        costs += f" and each draft step {draft_ratio:.2f}"
    assert ctrl.decision.reason == (
        f"off: {outcome} ({costs}); measured again every {GammaController.PROBE_MAX:,} tokens"
    )


def test_fixed_and_off_policies_say_so() -> None:
    ctrl = controller(0.35, mode="fixed")
    assert ctrl.decide_gamma() == 1
    assert ctrl.decision.reason == "fixed γ=1: expected 0.90x, slower than plain decoding"
    ctrl = controller(0.35, mode="off")
    assert ctrl.decide_gamma() == 0
    assert ctrl.decision.reason == "off: the policy is off (--policy off)"


# The sentences alone (gambit.engine.gamma.controller_wording), without a policy.


@pytest.mark.parametrize(
    ("speedup", "text"), [(1.02, "2 %"), (1.049, "4.9 %"), (0.62, "38 %"), (1.0, "0 %")]
)
def test_percent_reads_whole_or_one_decimal(speedup: float, text: str) -> None:
    assert wording.percent(speedup) == text


def test_off_and_probe_sentences_name_the_margin_to_switch_on() -> None:
    assert wording.off_reason(0.9, 1.05, 1.0) == (
        "off: a draft would lose 10 % (expected 0.90x); on once it would gain more than 5 %"
    )
    assert wording.off_reason(1.03, 1.05, 1.0) == (
        "off: a draft would gain 3 %, below the 5 % needed to switch on"
    )
    assert wording.probe_reason(6, 1.05) == (
        "probing: trying γ=6 to re-measure acceptance (on if a draft would gain more than 5 %)"
    )


def test_cannot_pay_names_the_batch_and_draft_costs() -> None:
    c = costs(t2_ratio=1.9, draft_ratio=0.4)
    assert wording.cannot_pay_reason(0.8, 1, c, 1.0, 2048) == (
        "off: cannot pay here: even if every draft were accepted, γ=1 would reach only 0.80x "
        "(verifying 2 tokens costs 1.90 plain steps and each draft step 0.40); measured again "
        "every 2,048 tokens"
    )
