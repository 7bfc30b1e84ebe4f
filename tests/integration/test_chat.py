"""Chat on real weights: the model's template, multi-turn KV reuse, stop
conditions, the invariants of ``Round`` events, and the text stream."""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.machine.tokens import common_prefix_length
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import ChatPromptBuilder, ChatTemplate, Message
from gambit.engine.text.reply import GenerationConfig, Round, StopReason
from gambit.engine.text.text_stream import TextStream
from gambit.engine.verification.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
# One thread: the machine's two cores are shared with other jobs, and llama.cpp's
# spinning thread pool slows down a hundredfold when its threads get preempted.
# Batches of at most 32 tokens: llama.cpp's CPU kernels switch to another
# (numerically different) path for batches of 64 tokens or more, so a prompt
# decoded in one large batch gives slightly different logits than the same
# tokens decoded turn by turn. Below that size both are bit-identical.
OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=1, n_batch=32)
POEM = "Write a short poem about the sea."


@pytest.fixture(scope="module")
def q8(smol_q8_0: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(smol_q8_0, OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="module")
def q4(smol_q4_1: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(smol_q4_1, OPTIONS) as rt:
        yield rt


def _decoder(kind: str, target: ModelRuntime, draft: ModelRuntime) -> SpeculativeDecoder:
    target.clear()
    draft.clear()
    if kind == "plain":
        return SpeculativeDecoder(target)
    return SpeculativeDecoder(target, DraftModelDrafter(draft), FixedGamma(4))


def _prompt(rt: ModelRuntime, text: str) -> list[int]:
    return ChatPromptBuilder(rt).build([Message("user", text)], reserve=256).tokens


def _tokens(rounds: list[Round]) -> list[int]:
    return [t for r in rounds for t in r.tokens]


# ------------------------------------------------------------------------ template


def test_template_renders_smollm2_chatml(rt_q4_1: ModelRuntime) -> None:
    template = ChatTemplate.for_model(rt_q4_1)
    text = template.render(
        [
            Message("system", "Be brief."),
            Message("user", "Hi"),
            Message("assistant", "Hello!"),
            Message("user", "How are you?"),
        ]
    )
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # without a system message SmolLM2's template supplies its own
    text = template.render([Message("user", "Hi")])
    assert text.startswith("<|im_start|>system\n")
    assert "SmolLM" in text
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert not template.render([Message("user", "Hi")], add_generation_prompt=False).endswith(
        "<|im_start|>assistant\n"
    )
    # the special tokens of the rendering are parsed as single tokens
    tokens = ChatPromptBuilder(rt_q4_1).build([Message("user", "Hi")], reserve=16).tokens
    im_start = rt_q4_1.tokenize("<|im_start|>", add_special=False)
    assert len(im_start) == 1 and tokens.count(im_start[0]) == 3


# ------------------------------------------------------------------ multi-turn reuse


def test_second_turn_reuses_the_first(smol_q8_0: Path, smol_q4_1: Path) -> None:
    # a fixed γ: every round drafts, so turn 1 leaves a cache that was cut back
    # after rejected drafts, and turn 2 must build on it
    config = EngineConfig(
        target=smol_q8_0, drafter="draft", draft=smol_q4_1, target_options=OPTIONS, policy="fixed"
    )
    gen = GenerationConfig(max_tokens=24, sampling=GREEDY)
    turn1 = [Message("user", "What is the capital of France?")]

    engine = Engine(config)
    try:
        rounds1 = list(engine.chat(turn1, gen))
        reply1 = "".join(r.text for r in rounds1)
        assert reply1.strip()
        assert sum(r.n_drafted for r in rounds1) > 0
        committed = list(engine.decoder.context)  # prompt + reply of turn 1
        target = engine.target
        assert target.kv_tokens == committed[:-1]  # all but the last token are cached

        turn2 = [*turn1, Message("assistant", reply1), Message("user", "And of Germany?")]
        prompt2 = engine.chat_builder.build(turn2, reserve=gen.max_tokens).tokens
        # the history is not re-tokenized: the new prompt extends turn 1's tokens
        assert prompt2[: len(committed)] == committed
        n_new = len(prompt2) - len(committed)
        assert n_new > 0
        assert common_prefix_length(target.kv_tokens, prompt2) == len(committed) - 1

        # ... nor re-evaluated: prefill decodes only the new tokens. With batches
        # of n_batch tokens, re-evaluating the whole prompt would take more calls.
        n_batch = target.n_batch
        assert math.ceil((len(prompt2) - 1) / n_batch) > math.ceil(n_new / n_batch)
        calls = target.decode_calls
        stream = engine.chat(turn2, gen)
        first = next(stream)  # prefill + the first round's verification decode
        assert target.decode_calls - calls == math.ceil(n_new / n_batch) + 1
        rounds2 = [first, *stream]
        assert sum(r.n_drafted for r in rounds2) > 0
        assert engine.decoder.context[: len(prompt2)] == prompt2
        warm = _tokens(rounds2)
        warm_text = "".join(r.text for r in rounds2)
    finally:
        engine.close()

    cold_engine = Engine(config)
    try:
        assert cold_engine.chat_builder.build(turn2, reserve=gen.max_tokens).tokens == prompt2
        cold_rounds = list(cold_engine.chat(turn2, gen))
    finally:
        cold_engine.close()
    assert _tokens(cold_rounds) == warm
    assert "".join(r.text for r in cold_rounds) == warm_text


# ------------------------------------------------------------------ stop conditions


@pytest.mark.parametrize("kind", ["plain", "draft"])
def test_max_tokens(q8: ModelRuntime, q4: ModelRuntime, kind: str) -> None:
    decoder = _decoder(kind, q8, q4)
    prompt = _prompt(q8, POEM)
    rounds = list(decoder.generate(prompt, GenerationConfig(max_tokens=5, sampling=GREEDY)))
    assert len(_tokens(rounds)) == 5
    assert rounds[-1].stop is StopReason.MAX_TOKENS
    assert all(r.stop is None for r in rounds[:-1])
    assert decoder.context == prompt + _tokens(rounds)


@pytest.mark.parametrize("kind", ["plain", "draft"])
def test_stop_string(q8: ModelRuntime, q4: ModelRuntime, kind: str) -> None:
    prompt = _prompt(q8, POEM)
    config = GenerationConfig(max_tokens=48, sampling=GREEDY)
    reply = "".join(r.text for r in _decoder(kind, q8, q4).generate(prompt, config))
    words = re.findall(r"[A-Za-z]{4,}", reply)
    assert len(words) >= 3, reply
    word = words[len(words) // 2]
    expected = reply[: reply.find(word)]
    assert expected.strip()

    stopping = GenerationConfig(max_tokens=48, sampling=GREEDY, stop_strings=(word,))
    rounds = list(_decoder(kind, q8, q4).generate(prompt, stopping))
    assert rounds[-1].stop is StopReason.STOP_STRING
    assert all(r.stop is None for r in rounds[:-1])
    assert "".join(r.text for r in rounds) == expected
    for r in rounds:  # no round showed the stop string, or anything after it
        assert word not in r.text


@pytest.mark.parametrize("kind", ["plain", "draft"])
def test_cancel_after_first_round(q8: ModelRuntime, q4: ModelRuntime, kind: str) -> None:
    decoder = _decoder(kind, q8, q4)
    prompt = _prompt(q8, POEM)
    cancel = threading.Event()
    rounds: list[Round] = []
    config = GenerationConfig(max_tokens=64, sampling=SamplingParams(seed=7))
    for rnd in decoder.generate(prompt, config, cancel):
        rounds.append(rnd)
        if len(rounds) == 1:
            assert rnd.tokens and rnd.stop is None
            cancel.set()
    assert len(rounds) == 2
    last = rounds[-1]
    assert last.stop is StopReason.CANCELLED
    assert last.tokens == () and last.n_drafted == 0
    # nothing was decoded or committed after the first round
    assert decoder.context == prompt + list(rounds[0].tokens)
    assert len(q8.kv_tokens) == len(decoder.context) - 1


# ------------------------------------------------------------------ round invariants


def test_round_invariants(q8: ModelRuntime, q4: ModelRuntime) -> None:
    gamma = 4
    rejected = fully_accepted = 0
    for text in (POEM, "List the days of the week, one per line."):
        decoder = _decoder("draft", q8, q4)
        prompt = _prompt(q8, text)
        rounds = list(decoder.generate(prompt, GenerationConfig(max_tokens=64, sampling=GREEDY)))
        assert [r.index for r in rounds] == list(range(len(rounds)))
        for r in rounds:
            assert 0 <= r.n_accepted <= r.n_drafted <= r.gamma <= gamma
            assert len(r.outcomes) == r.n_accepted + (1 if r.n_accepted < r.n_drafted else 0)
            assert r.outcomes == (True,) * r.n_accepted + (False,) * (
                len(r.outcomes) - r.n_accepted
            )
            k = min(r.n_accepted, len(r.tokens))
            assert r.from_draft == (True,) * k + (False,) * (len(r.tokens) - k)
            assert len(r.tokens) <= r.n_accepted + 1
            if r.stop is None:
                assert len(r.tokens) == r.n_accepted + 1  # accepted drafts + one of the target's
            assert r.t_draft_s >= 0 and r.t_verify_s >= 0
            rejected += r.n_accepted < r.n_drafted
            fully_accepted += 0 < r.n_drafted == r.n_accepted
        elapsed = [r.elapsed_s for r in rounds]
        assert all(b > a for a, b in itertools.pairwise(elapsed))
        assert elapsed[0] > 0
        assert rounds[-1].stop in (StopReason.EOG, StopReason.MAX_TOKENS)
        assert "".join(r.text for r in rounds) == q8.detokenize(_tokens(rounds))
    # both branches of verification were exercised
    assert rejected > 0 and fully_accepted > 0


# ---------------------------------------------------------------------- text stream

TEXT = "héllo wörld 🎉"


def test_text_stream_split_utf8_at_every_byte() -> None:
    data = TEXT.encode("utf-8")
    for cut in range(len(data) + 1):
        stream = TextStream(())
        pieces = [stream.feed(data[:cut])[0], stream.feed(data[cut:])[0], stream.finish()]
        assert "".join(pieces) == TEXT, cut
        assert all("\ufffd" not in p for p in pieces)
        assert stream.text == TEXT
    stream = TextStream(())
    pieces = [stream.feed(bytes([b]))[0] for b in data]
    assert "".join(pieces) + stream.finish() == TEXT
    assert all("\ufffd" not in p for p in pieces)
    # whatever was emitted before a split character is whole characters only
    assert pieces[data.index("🎉".encode()) + 3] == "🎉"


def test_text_stream_stop_string_across_feeds() -> None:
    stream = TextStream(("STOP",))
    first, hit1 = stream.feed(b"abcST")
    second, hit2 = stream.feed(b"OPdef")
    assert (hit1, hit2) == (False, True)
    assert first + second == "abc"
    assert stream.finish() == ""
    assert stream.text == "abc"


def test_text_stream_holds_back_only_a_possible_stop_prefix() -> None:
    # "c" cannot begin "STOP", so only "ST" needs holding back
    stream = TextStream(("STOP",))
    assert stream.feed(b"abcST") == ("abc", False)
    assert stream.feed(b"OPdef") == ("", True)


def test_text_stream_cuts_at_the_earliest_stop_string() -> None:
    # A round can bring several tokens at once: the first stop string in the
    # text must win, whatever its place in the list.
    stream = TextStream(("User:", "\n"))
    assert stream.feed(b"Hi\nUser: next") == ("Hi", True)
    assert stream.text == "Hi"
