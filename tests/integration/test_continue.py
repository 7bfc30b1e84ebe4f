"""Continue on real weights: a reply cut after some of its N tokens and
continued to N equals the reply of N tokens never cut, token for token, at
temperature 0.

The target is SmolLM2 Q8_0, whose CPU kernels give the same logits batched
and single in batches under 32 tokens (``OPTIONS``, as in test_chat), so
that the continuation's prompt, decoded in batches, meets the very logits
the uninterrupted reply met token by token. The prompt asks for emoji, which
SmolLM2 writes in two or three byte-level tokens each, and the cut falls
inside one of them (the first such cut from N/2 on: which token boundary
splits a character depends on the reply, and the reply on the CPU's
kernels): the text shown leaves the character out, the kept tokens hold its
first bytes, and the continuation completes it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.continuation import KeptTokens, whole_text
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams

OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=1, n_batch=32)
N = 30
ASK = [Message("user", "Write a sentence about summer using emoji.")]
GREEDY = SamplingParams(temperature=0.0)
# The repetition penalty reads the last 64 tokens: the reply's start among them.
PENALISED = SamplingParams(temperature=0.0, repeat_penalty=1.3, repeat_last_n=64)


@pytest.fixture(scope="module", params=["none", "draft", "draft+lookup"])
def engine(request: pytest.FixtureRequest, smol_q8_0: Path, smol_q4_1: Path) -> Iterator[Engine]:
    drafter = request.param
    config = EngineConfig(
        target=smol_q8_0,
        drafter=drafter,
        draft=None if drafter == "none" else smol_q4_1,
        target_options=OPTIONS,
        policy="fixed",  # drafts every round: the continuation is drafted too
    )
    engine = Engine(config)
    yield engine
    engine.close()


def ends_inside_a_character(engine: Engine, tokens: Sequence[int]) -> bool:
    """Whether the last of ``tokens`` holds only the first bytes of a character."""
    data = b"".join(map(engine.target.token_piece, tokens))
    return whole_text(data) != data.decode("utf-8", "replace")


def cut_inside_a_character(engine: Engine, tokens: Sequence[int]) -> int:
    """The first cut from N/2 on after which the kept tokens end inside a
    UTF-8 character; N/2 where none does."""
    cuts = range(N // 2, len(tokens))
    return next((c for c in cuts if ends_inside_a_character(engine, tokens[:c])), N // 2)


def reply(
    engine: Engine,
    messages: Sequence[Message],
    max_tokens: int,
    sampling: SamplingParams,
    start: Sequence[int] = (),
) -> tuple[list[int], str, list[Round]]:
    config = GenerationConfig(max_tokens=max_tokens, sampling=sampling)
    rounds = list(engine.chat(messages, config, reply=start))
    return [t for r in rounds for t in r.tokens], "".join(r.text for r in rounds), rounds


@pytest.mark.parametrize("sampling", [GREEDY, PENALISED], ids=["greedy", "penalised"])
def test_a_reply_cut_inside_a_character_and_continued_equals_the_uncut_reply(
    engine: Engine, sampling: SamplingParams
) -> None:
    full, full_text, _ = reply(engine, ASK, N, sampling)
    cut = cut_inside_a_character(engine, full)
    first, first_text, _ = reply(engine, ASK, cut, sampling)
    assert first == full[:cut]
    if sampling is GREEDY:  # the cut splits an emoji: its first bytes are not text yet
        assert ends_inside_a_character(engine, first)
        assert "\ufffd" not in first_text
    kept = KeptTokens(engine.tokenizer_fingerprint, tuple(first))
    start = engine.resume_tokens(first_text, kept)
    assert start == first  # the kept tokens, not the text tokenized again

    rest, rest_text, rounds = reply(engine, ASK, N - cut, sampling, start)
    assert first + rest == full
    assert first_text + rest_text == full_text
    if engine.drafter is not None:
        assert sum(r.n_drafted for r in rounds) > 0  # the drafters saw the continued context


@pytest.mark.parametrize("engine", ["none", "draft+lookup"], indirect=True)
def test_continue_after_other_replies_and_in_a_later_turn(engine: Engine) -> None:
    """Another conversation in between (the engine no longer holds the cut
    reply), and a cut in the second turn of a conversation."""
    full, full_text, _ = reply(engine, ASK, N, GREEDY)
    cut = cut_inside_a_character(engine, full)
    first, first_text, _ = reply(engine, ASK, cut, GREEDY)
    reply(engine, [Message("user", "What is the capital of France?")], 8, GREEDY)
    start = engine.resume_tokens(first_text, KeptTokens(engine.tokenizer_fingerprint, (*first,)))
    rest, rest_text, _ = reply(engine, ASK, N - cut, GREEDY, start)
    assert (first + rest, first_text + rest_text) == (full, full_text)

    turns = [*ASK, Message("assistant", full_text), Message("user", "Now one more, please.")]
    full, full_text, _ = reply(engine, turns, 16, GREEDY)
    first, first_text, _ = reply(engine, turns, 8, GREEDY)
    rest, rest_text, _ = reply(engine, turns, 8, GREEDY, first)
    assert (first + rest, first_text + rest_text) == (full, full_text)


@pytest.mark.parametrize("engine", ["none"], indirect=True)
def test_tokens_that_do_not_spell_the_text_are_not_used(engine: Engine) -> None:
    full, _, _ = reply(engine, ASK, N, GREEDY)
    first, first_text, _ = reply(engine, ASK, cut_inside_a_character(engine, full), GREEDY)
    plain = engine.tokenize_text(first_text)
    assert plain != first  # (the text tokenized again lacks the split emoji's bytes)
    fingerprint = engine.tokenizer_fingerprint
    # another tokenizer's, the text edited since, ids outside the vocabulary
    assert engine.resume_tokens(first_text, KeptTokens("another model", (*first,))) == plain
    edited = first_text + " and more"
    assert engine.resume_tokens(edited, KeptTokens(fingerprint, (*first,))) == (
        engine.tokenize_text(edited)
    )
    wild = KeptTokens(fingerprint, (*first[:-1], engine.target.n_vocab))
    assert engine.resume_tokens(first_text, wild) == plain
    assert engine.resume_tokens(first_text, None) == plain
