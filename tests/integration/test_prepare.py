"""The drafter reads the prompt after the first token, and only when it will
draft and reading pays."""

from __future__ import annotations

import numpy as np

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.controller import GammaController
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams

GREEDY = GenerationConfig(max_tokens=12, sampling=SamplingParams(temperature=0.0, seed=0))
TEXT = "Rewrite in the past tense: Tom walks his dog along the river every morning. " * 4


def test_the_first_token_comes_before_the_draft_model_reads_the_prompt(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    rt_q4_1.clear()
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), FixedGamma(4))
    prompt = rt_q8_0.tokenize(TEXT)
    stream = decoder.generate(prompt, GREEDY)
    first = next(stream)
    # The first token is the target's alone: a plain round, the draft untouched.
    assert len(first.tokens) == 1 and first.n_drafted == 0
    assert rt_q4_1.kv_tokens == []
    assert first.t_prompt_s > 0  # the target's prompt processing
    rounds = [first, *stream]
    # The draft read the prompt before the second round, as prompt processing;
    # that round had nothing left to catch up on: its drafting is steady-state.
    second = rounds[1]
    assert second.t_prompt_s > 0 and second.n_drafted > 0
    # (the first token after the prompt, which the first round's target made)
    assert second.n_draft_synced == 1
    assert rt_q4_1.kv_tokens[: len(prompt)] == prompt
    # Each round's catch-up is timed apart from its draft steps.
    for rnd in rounds:
        if rnd.n_drafted > 1:
            assert 0 < rnd.t_draft_synced_s < rnd.t_draft_s
    assert all(r.t_prompt_s == 0 for r in rounds[2:])


def test_draft_model_is_left_alone_while_speculation_is_off(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    rt_q4_1.clear()
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), FixedGamma(0))
    rounds = list(decoder.generate(rt_q8_0.tokenize(TEXT), GREEDY))
    assert all(r.n_drafted == 0 for r in rounds)
    assert rt_q4_1.kv_tokens == []  # no prompt processing spent on a drafter that never drafts


def test_behind_counts_what_reading_the_prompt_decodes(rt_q4_1: ModelRuntime) -> None:
    rt_q4_1.clear()
    drafter = DraftModelDrafter(rt_q4_1)
    prompt = rt_q4_1.tokenize(TEXT)
    assert drafter.behind(prompt) == len(prompt)
    calls = rt_q4_1.decode_calls
    drafter.prepare(prompt)
    assert rt_q4_1.kv_tokens == prompt and rt_q4_1.decode_calls > calls
    # A new turn: only what is new.
    turn = prompt + rt_q4_1.tokenize(" And then?", add_special=False)
    assert drafter.behind(turn) == len(turn) - len(prompt)
    assert drafter.behind(prompt) == 0  # read, with its last token's logits


def test_a_prompt_held_already_is_not_decoded_again(rt_q4_1: ModelRuntime) -> None:
    """A reply regenerated on the same prompt (or a statistical test's
    hundreds): the draft's cache holds the prompt and more. Reading it
    decodes nothing; the first draft decodes the prompt's last token only."""
    rt_q4_1.clear()
    drafter = DraftModelDrafter(rt_q4_1)
    prompt = rt_q4_1.tokenize(TEXT)
    greedy = SamplingParams(temperature=0.0)
    drafter.prepare(prompt[:-1])  # as the decoder reads a prompt
    first = drafter.draft(prompt, 4, greedy, np.random.default_rng(0))
    assert rt_q4_1.kv_tokens[: len(prompt)] == prompt and len(first.tokens) > 1
    calls = rt_q4_1.decode_calls
    assert drafter.behind(prompt) == 1
    drafter.prepare(prompt[:-1])
    assert rt_q4_1.decode_calls == calls and rt_q4_1.kv_tokens == prompt[:-1]
    again = drafter.draft(prompt, 4, greedy, np.random.default_rng(0))
    assert again.tokens == first.tokens
    # the prompt's last token, then a step per drafted token but the last (unverified)
    assert rt_q4_1.decode_calls == calls + 1 + len(again.tokens) - 1


def test_a_sync_to_what_was_just_decoded_decodes_nothing(rt_q4_1: ModelRuntime) -> None:
    rt_q4_1.clear()
    prompt = rt_q4_1.tokenize(TEXT)
    assert rt_q4_1.sync(prompt) == len(prompt)
    row = rt_q4_1.logits(-1).copy()
    calls = rt_q4_1.decode_calls
    assert rt_q4_1.decodes_to_sync(prompt) == 0
    assert rt_q4_1.sync(prompt) == 0 and rt_q4_1.decode_calls == calls
    assert np.array_equal(rt_q4_1.logits(-1), row)
    # Once the cache moved on, the last token is decoded again for its logits,
    # and they are the ones the prompt's batch gave (strict kernels).
    rt_q4_1.decode([prompt[0]])
    rt_q4_1.truncate(len(prompt))  # the same tokens, but the buffer's logits are gone
    assert rt_q4_1.decodes_to_sync(prompt) == 1
    assert rt_q4_1.sync(prompt) == 1
    assert np.array_equal(rt_q4_1.logits(-1), row)
    # Without logits, a cache holding the tokens and more is only cut back.
    rt_q4_1.decode([prompt[0]])
    assert rt_q4_1.sync(prompt, logits=False) == 0 and rt_q4_1.kv_tokens == prompt


def test_a_prompt_is_read_whole_and_a_long_catch_up_restarts_on_the_recent_window(
    rt_q4_1: ModelRuntime,
) -> None:
    rt_q4_1.clear()
    drafter = DraftModelDrafter(rt_q4_1, max_catch_up=16, window=24)
    prompt = rt_q4_1.tokenize(TEXT)
    assert len(prompt) > 40
    # A prompt is read whole, past the window: a request's instruction sits
    # at its start ("Rewrite in the past tense: ..."), where a draft reading
    # only the last 24 tokens would never see it.
    assert drafter.behind(prompt) == len(prompt)
    drafter.prepare(prompt)
    assert rt_q4_1.kv_tokens == prompt
    # Mid-reply, more than max_catch_up tokens behind (a stretch decoded
    # plainly): the draft restarts on the context's last 24 tokens instead.
    later = prompt + prompt
    drafter.draft(later, 2, SamplingParams(temperature=0.0), np.random.default_rng(0))
    assert rt_q4_1.kv_tokens[:24] == later[-24:]


def test_a_prompt_not_worth_reading_is_left_unread(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    # The adaptive controller with drafting on, but reading the prompt priced
    # far above what a 12-token reply can save: the reply decodes plainly,
    # the draft reads nothing, and the output is the target's own.
    c = CostModel(9)
    for k in range(1, 10):
        c.set_target(k, 0.010 * (1 + 0.1 * (k - 1)))
    c.t_draft = 0.002
    c.catch_up_ratio = 5.0
    ctrl = GammaController(c, gamma_max=8)
    ctrl.acceptance.alpha[:] = 0.9
    ctrl.acceptance.seen[:] = 20
    assert ctrl.on
    rt_q4_1.clear()
    prompt = rt_q8_0.tokenize(TEXT)
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), ctrl)
    rounds = list(decoder.generate(prompt, GREEDY))
    assert all(r.n_drafted == 0 for r in rounds)
    assert rt_q4_1.kv_tokens == []
    assert ctrl.decision.reason.startswith("off for this reply")
    plain = SpeculativeDecoder(rt_q8_0)
    expected = [t for r in plain.generate(prompt, GREEDY) for t in r.tokens]
    assert [t for r in rounds for t in r.tokens] == expected
