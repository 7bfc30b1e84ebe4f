"""Even streaming in a real ChatView: a real reply's bursts of accepted tokens,
replayed on a clock of the test's own, are shown evenly and never late.

The harness replays the rounds of a real speculative reply (a draft model
drafting for a Q8_0 target, fixed γ = 6) at the pace of the cost-scaled
realistic pair, where a round of ~7 tokens takes ~0.3 s, ticks the view's
repaint as the window's timer does, and compares the gaps between tokens as
shown with the gaps as they arrived. No wall-clock time decides anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.chat import ChatPromptBuilder, Message
from gambit.engine.text.pacing import REPAINT_S
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams
from gambit.ui.window.chat_view import ChatView

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
ROUND_S = 0.3  # a round of the cost-scaled F32 x4 pair with γ = 6-8 (docs/performance.md)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def bursty_rounds(rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime) -> list[Round]:
    rt_q8_0.clear()
    rt_q4_1.clear()
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), FixedGamma(6))
    config = GenerationConfig(max_tokens=96, sampling=SamplingParams(temperature=0.0, seed=0))
    prompt = ChatPromptBuilder(rt_q8_0).build([Message("user", PROMPT)], reserve=96).tokens
    rounds = [r for r in decoder.generate(prompt, config) if r.text]
    assert max(len(r.tokens) for r in rounds) >= 5  # bursts to pace
    return rounds


@pytest.fixture
def view(qtbot: QtBot) -> Iterator[ChatView]:
    v = ChatView()
    qtbot.addWidget(v)
    v.resize(640, 480)
    v.show()
    yield v
    v.close()


def _replay(view: ChatView, rounds: list[Round]) -> tuple[list[float], list[float]]:
    """(arrival times, shown times) of every token, the rounds arriving every
    ROUND_S and the view repainting every REPAINT_S, as the window drives it."""
    clock = Clock()
    view.clock = clock
    view.begin_reply()
    arrivals = [0.5 + ROUND_S * i for i in range(len(rounds))]
    chars = [len(r.text) for r in rounds]
    arrived: list[float] = []
    shown_chars: list[float] = []  # the time each character appeared
    i = 0
    while i < len(rounds) or len(shown_chars) < sum(chars):
        clock.now += REPAINT_S
        while i < len(rounds) and arrivals[i] <= clock.now:
            r = rounds[i]
            view.add_to_reply(r.text, (False,) * len(r.text), ROUND_S)
            arrived += [arrivals[i]] * len(r.tokens)
            i += 1
        if i == len(rounds):
            view.end_reply("done")  # the reply's end shows what is held
        else:
            view.flush_reply()
        message = view.messages[-1]
        shown_chars += [clock.now] * (len(message.text) - len(shown_chars))
    # A round's k-th of n tokens shows with its share of the round's characters.
    shown: list[float] = []
    start = 0
    for r, n_chars in zip(rounds, chars, strict=True):
        n = len(r.tokens)
        shown += [shown_chars[start + math.ceil(k * n_chars / n) - 1] for k in range(1, n + 1)]
        start += n_chars
    return arrived, shown


def _gap(times: list[float], percentile: float) -> float:
    return float(np.percentile(np.diff(times), percentile))


def test_bursts_are_shown_evenly_and_never_a_round_late(
    view: ChatView, bursty_rounds: list[Round]
) -> None:
    arrived, shown = _replay(view, bursty_rounds)
    assert len(shown) == len(arrived)
    late = [s - a for s, a in zip(shown, arrived, strict=True)]
    assert min(late) >= 0  # nothing shows before it arrived
    assert max(late) <= ROUND_S + REPAINT_S + 1e-9  # never more than a round behind
    # As they arrive: a round's silence, then a burst of gaps of 0. As shown: a
    # round's tokens spread over its time (a round of two shows one every
    # ROUND_S / 2: the p99; most rounds bring 6-7, a tick or so apart).
    assert _gap(arrived, 90) == pytest.approx(ROUND_S)
    assert _gap(arrived, 50) == 0.0
    assert _gap(shown, 90) <= ROUND_S / 3
    assert _gap(shown, 99) <= 0.6 * _gap(arrived, 99)
    assert _gap(shown, 50) > 0.0
    text = "".join(r.text for r in bursty_rounds)
    assert view.messages[-1].text == text
    assert text.strip()[:20] in view.toPlainText()


def test_without_pacing_tokens_show_the_moment_they_arrive(
    view: ChatView, bursty_rounds: list[Round]
) -> None:
    view.set_pacing(False)
    arrived, shown = _replay(view, bursty_rounds)
    assert all(0 <= s - a < REPAINT_S + 1e-9 for s, a in zip(shown, arrived, strict=True))


def test_what_is_held_back_is_saved_and_shown_when_pacing_is_switched_off(
    view: ChatView, bursty_rounds: list[Round]
) -> None:
    view.clock = Clock()
    view.begin_reply()
    first, burst = bursty_rounds[0], max(bursty_rounds[1:], key=lambda r: len(r.text))
    view.add_to_reply(first.text, (False,) * len(first.text), ROUND_S)
    view.add_to_reply(burst.text, (True,) * len(burst.text), ROUND_S)
    view.flush_reply()
    assert view.messages[-1].text == first.text  # the burst is held back ...
    # ... but what a save or a crash keeps is everything that arrived.
    text, drafted = view.streamed()
    assert text == first.text + burst.text
    assert drafted == (False,) * len(first.text) + (True,) * len(burst.text)
    view.set_pacing(False)
    assert view.messages[-1].text == first.text + burst.text
