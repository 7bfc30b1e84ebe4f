"""The γ policy, driven with synthetic acceptance and cost curves."""

from __future__ import annotations

import numpy as np
import pytest

from gambit.engine.controller import AcceptanceModel, CostModel, GammaController
from gambit.engine.decoder import Round

GAMMA_MAX = 8


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
    ctrl.acceptance.alpha[:] = alpha
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
    ctrl = with_alpha(GammaController(costs(slope=0.02)), 0.9)
    gamma = ctrl.next_gamma()
    assert gamma >= 6
    assert ctrl.decision.expected_speedup > 2.0
    assert ctrl.decision.reason.startswith("on:")


def test_low_acceptance_switches_off() -> None:
    ctrl = with_alpha(GammaController(costs(slope=0.2, t_draft=0.004)), 0.3)
    assert ctrl.next_gamma() >= 1  # starts on (prior) for one round ...
    ctrl.observe(plain_round(0.010))  # ... any observation re-evaluates
    assert not ctrl.on
    assert ctrl.next_gamma() == 0
    assert ctrl.decision.reason.startswith("off:")
    assert ctrl.decision.best_speedup < 1.0


def test_costly_verification_switches_off_even_with_good_drafts() -> None:
    # The measured CPU case: a 5-token batch costs ~2.8x one token, and the
    # draft model's step costs 60 % of a target token.
    ctrl = with_alpha(GammaController(costs(slope=0.45, t_draft=0.006)), 0.9)
    ctrl.observe(plain_round(0.010))
    assert ctrl.next_gamma() == 0
    assert ctrl.decision.best_speedup < 1.0


def test_gamma_grows_with_acceptance() -> None:
    chosen = []
    for alpha in (0.5, 0.7, 0.85, 0.95):
        ctrl = with_alpha(GammaController(costs(slope=0.1, t_draft=0.001)), alpha)
        chosen.append(ctrl.next_gamma())
    assert chosen == sorted(chosen)
    assert chosen[-1] > chosen[0]


def test_probes_while_off_and_recovers_when_text_turns_predictable() -> None:
    ctrl = with_alpha(GammaController(costs(slope=0.1, t_draft=0.001)), 0.1)
    ctrl.observe(plain_round(0.010))
    assert not ctrl.on
    # Plain rounds until a probe is due; failed probes double the interval.
    intervals = []
    tokens = 0
    for _ in range(400):
        gamma = ctrl.next_gamma()
        if gamma:
            intervals.append(tokens)
            tokens = 0
            ctrl.observe(spec_round(gamma, 0, 0.001 * gamma, 0.012))  # probe fails
        else:
            tokens += 1
            ctrl.observe(plain_round(0.010))
    assert intervals[:3] == [16, 32, 64]
    # The text turns predictable: probes succeed, acceptance climbs, it switches on.
    for _ in range(1000):
        gamma = ctrl.next_gamma()
        if gamma:
            ctrl.observe(spec_round(gamma, gamma, 0.001 * gamma, 0.012))
        else:
            ctrl.observe(plain_round(0.010))
        if ctrl.on:
            break
    assert ctrl.on
    # Drafts keep landing: γ grows past the probe's length.
    for _ in range(100):
        gamma = ctrl.next_gamma()
        ctrl.observe(spec_round(gamma, gamma, 0.001 * gamma, 0.010 * (1 + 0.1 * gamma)))
    assert ctrl.next_gamma() >= 5


def test_hysteresis_does_not_flap_near_break_even() -> None:
    # Expected speedup sits between the off (1.0) and on (1.05) thresholds:
    # the controller keeps whatever state it is in.
    ctrl = GammaController(costs(slope=0.0, t_draft=0.0))
    ctrl.acceptance.alpha[:] = 0.0
    ctrl.acceptance.alpha[0] = 0.03  # γ=1: E = 1.03 tokens for the same cost
    ctrl.observe(plain_round(0.010))
    assert ctrl.on
    ctrl.on = False
    ctrl.observe(plain_round(0.010))
    assert not ctrl.on


def test_fixed_and_off_modes() -> None:
    fixed = with_alpha(GammaController(costs(slope=0.45, t_draft=0.006), mode="fixed",
                                       fixed_gamma=4), 0.1)  # fmt: skip
    fixed.observe(plain_round(0.010))
    assert fixed.next_gamma() == 4  # even when it loses
    assert fixed.decision.expected_speedup < 1.0
    off = with_alpha(GammaController(costs(slope=0.02), mode="off"), 0.99)
    assert off.next_gamma() == 0
    assert off.decision.best_speedup > 2.0  # it knows what it is missing


def test_measurements_update_costs_and_acceptance() -> None:
    c = costs(t1=0.010)
    ctrl = GammaController(c)
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


def test_unmeasured_batch_sizes_are_interpolated() -> None:
    c = CostModel(9)
    c.set_target(1, 0.010)
    c.set_target(5, 0.018)
    assert c.verify_cost(3) == pytest.approx(0.014)
    assert c.verify_cost(9) == pytest.approx(0.018 * 9 / 5)
    empty = CostModel(9)
    assert empty.verify_cost(4) == 4.0
    assert np.isfinite(GammaController(empty).decision.best_speedup)
