"""Whether reading the prompt can pay: the draft model's prompt reading weighed
against what drafting could save over the coming reply if every draft landed."""

from __future__ import annotations

import dataclasses

import pytest
from test_controller import controller, costs, plain_round, spec_round, with_alpha

from gambit.engine.gamma.controller import GammaController
from gambit.engine.gamma.controller_learning import RoundLearning
from gambit.engine.text.reply import StopReason


def draft_model_controller(alpha: float = 0.95) -> GammaController:
    # A compute-bound pair much like F32 + Q4_1 here: t(k) = t1 (1 + 0.25 (k - 1)),
    # a draft step 0.4 t1, and the prompt read at 0.25 t1 a token.
    c = costs(t1=0.010, slope=0.25, t_draft=0.004)
    c.catch_up_ratio = 0.25
    ctrl = with_alpha(controller(c), alpha)
    ctrl.observe(spec_round(4, 4, 0.016, 0.020))  # a round as the costs say
    ctrl.decide_gamma()
    return ctrl


def end_reply(ctrl: GammaController, n_tokens: int) -> None:
    rnd = plain_round(0.010)
    ctrl.observe(dataclasses.replace(rnd, tokens=tuple(range(n_tokens)), stop=StopReason.EOG))


def test_a_long_prompt_that_could_not_pay_is_not_read() -> None:
    ctrl = draft_model_controller()
    assert ctrl.on and ctrl.decision.expected_speedup > 1.1
    # 300 prompt tokens cost 0.75 s to read; 128 tokens at the ceiling
    # (every draft landing, ~1.45x) save ~0.4 s.
    ceiling = ctrl.ceiling_speedup()
    assert 1.4 < ceiling < 1.5
    assert 128 * 0.010 * (1 - 1 / ceiling) < 300 * 0.25 * 0.010
    ctrl.start_reply(300)
    assert not ctrl.decide_reading(300, horizon=128)
    for _ in range(5):  # the whole reply decodes plainly, and says why
        assert ctrl.decide_gamma() == 0
        assert ctrl.decision.reason.startswith("off for this reply: reading the prompt (300 tokens")
        ctrl.observe(plain_round(0.010))
    # A short prompt (or a new turn, whose earlier tokens the draft holds) pays.
    ctrl.start_reply(20)
    assert ctrl.decide_reading(20, horizon=128)
    ctrl.observe_reading(20, 0.005)
    assert ctrl.decide_gamma() > 0


def test_a_long_reply_pays_for_a_long_prompt() -> None:
    ctrl = draft_model_controller()
    # Reading 150 tokens costs 37.5 t1; at the ~1.45x ceiling drafting saves
    # 0.31 t1 a token: ~79 t1 over the prior's 256 tokens (the expected length
    # caps the horizon), ~20 t1 over 64.
    assert ctrl.decide_reading(150, horizon=1024)
    assert not ctrl.decide_reading(150, horizon=64)


def test_the_expected_length_is_learned_from_earlier_replies() -> None:
    ctrl = draft_model_controller()
    assert ctrl.learning.expected_reply_length() == RoundLearning.REPLY_PRIOR
    assert ctrl.learning.expected_reply_length(100) == 100
    for _ in range(20):
        ctrl.start_reply(10)
        ctrl.observe_reading(10, 0.0)
        end_reply(ctrl, 40)
    assert ctrl.learning.expected_reply_length(512) == pytest.approx(40, rel=0.01)
    # Short replies cannot pay for a prompt of 100 tokens (0.25 s to read) ...
    assert not ctrl.decide_reading(100, horizon=512)
    # ... but a cancelled reply says nothing about how long replies are.
    ctrl.start_reply(10)
    stopped = dataclasses.replace(plain_round(0.010), stop=StopReason.CANCELLED)
    ctrl.observe(stopped)
    assert ctrl.learning.expected_reply_length(512) == pytest.approx(40, rel=0.01)


def test_the_reading_itself_is_measured() -> None:
    ctrl = draft_model_controller()
    ctrl.start_reply(200)
    assert ctrl.decide_reading(200, horizon=4096)
    # It took 0.2 s: 0.1 t1 a token, where 0.25 was assumed.
    ctrl.observe_reading(200, 0.2)
    assert ctrl.costs.catch_up_ratio == pytest.approx(0.25 + 0.1 * (0.1 - 0.25))


def test_free_reading_always_reads_and_untried_drafters_are_judged_alike() -> None:
    ctrl = draft_model_controller()
    assert ctrl.decide_reading(0, horizon=1)  # prompt lookup reads for free
    fresh = controller(costs(t1=0.010, slope=0.02, t_draft=0.001))
    fresh.costs.catch_up_ratio = 0.25
    assert fresh.on and not fresh.acceptance.seen.any()
    # The ceiling needs no measured acceptance: a short reply after a huge
    # prompt cannot pay, whatever the drafter turns out to be.
    assert fresh.decide_reading(100, horizon=128)
    assert not fresh.decide_reading(3000, horizon=16)


def test_fixed_gamma_always_reads() -> None:
    ctrl = controller(costs(t1=0.010, slope=0.25, t_draft=0.004), mode="fixed")
    ctrl.costs.catch_up_ratio = 0.25
    ctrl.start_reply(3000)
    assert ctrl.decide_reading(3000, horizon=16)
    ctrl.observe_reading(3000, 1.0)
    assert ctrl.decide_gamma() == ctrl.fixed_gamma


def test_while_off_a_reply_reads_only_for_a_probe() -> None:
    ctrl = draft_model_controller(alpha=0.05)
    ctrl.observe(spec_round(4, 0, 0.016, 0.020))
    assert not ctrl.on
    ctrl._tokens_since_probe = 0
    assert not ctrl.decide_reading(30, horizon=128)
    ctrl._tokens_since_probe = GammaController.PROBE_MAX
    assert ctrl.decide_reading(30, horizon=128)
