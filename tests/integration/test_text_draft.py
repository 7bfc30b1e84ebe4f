"""A draft of another tokenizer drafts through text, on real tokenizers and weights.

SmolLM2 (byte-level BPE, 49,152 tokens, ChatML template) and Gemma-3-270M
(SentencePiece, 262,144 tokens, a base model): each drafts for the other.
The joins between committed and drafted text are where tokenizers disagree
("\\n\\n" before a word is one Gemma token and two SmolLM2 ones; an emoji is
one Gemma token and three SmolLM2 byte tokens), so each pitfall has a case here; then the
drafter end to end: greedy identity where the target's kernels are
batch-invariant (SmolLM2 Q8_0, Gemma Q8_0), and state that recovers after a
rejection. Its temperature-1 distribution test is in test_lossless.py.
"""

from __future__ import annotations

import random

import numpy as np

from gambit.bench.foresight import text_chains
from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.text_align import DraftContext, Drafted, Vocabulary, target_spans
from gambit.engine.drafters.text_draft import GREEDY, TextDraftDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.chat import ChatTemplate, Message
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams

CONFIG = GenerationConfig(max_tokens=48, sampling=SamplingParams(temperature=0.0))


def _spelled(rt: ModelRuntime, tokens: list[int]) -> bytes:
    return b"".join(rt.token_piece(t) for t in tokens)


def _tokens(rt: ModelRuntime, text: str) -> list[int]:
    return rt.tokenize(text, add_special=False, parse_special=False)


def target_proposal(target: Vocabulary, context: list[int], drafted: Drafted) -> list[int]:
    """The proposal's tokens (``target_spans`` without where each ends)."""
    return [tok for tok, _ in target_spans(target, context, drafted)]


def _ended(text: bytes) -> Drafted:
    """Drafted text that the draft ended (all of it settled)."""
    return Drafted(text, len(text), True)


# --------------------------------------------------------------- the joins
def test_a_proposal_spells_the_drafted_text_after_the_committed_tokens(
    rt_gemma: ModelRuntime,
) -> None:
    context = _tokens(rt_gemma, "def mean(values):\n    return sum(values)")
    drafted = b" / len(values)\n\n\ndef median(values):"
    proposal = target_proposal(rt_gemma, context, _ended(drafted))
    assert _spelled(rt_gemma, proposal) == drafted
    # Before a lookahead (the draft's last token), only what ends before it
    # is settled: "valu" + "es):" may be one token "values" in the target's.
    settled = drafted.index(b"values):")
    held = target_proposal(rt_gemma, context, Drafted(drafted, settled + 4, False))
    assert _spelled(rt_gemma, held) == drafted[:settled]


def test_committed_tokens_are_never_tokenized_again(rt_gemma: ModelRuntime) -> None:
    # The target committed "hel" + "lo" (not its own "hello"): the proposal
    # continues after them, it does not re-split them.
    hel, lo = _tokens(rt_gemma, "hel"), _tokens(rt_gemma, "lo")
    context = _tokens(rt_gemma, "Say") + hel + lo
    proposal = target_proposal(rt_gemma, context, _ended(b" world, again."))
    assert _spelled(rt_gemma, proposal) == b" world, again."


def test_a_join_that_merges_is_tokenized_after_the_committed_text(
    rt_gemma: ModelRuntime,
) -> None:
    # Committed "\n", drafted "\nThe": Gemma writes "\n\n" as one token,
    # which would cover a committed byte. The drafted text alone is proposed.
    nl2 = _tokens(rt_gemma, "\n\n")
    assert len(nl2) == 1
    context = _tokens(rt_gemma, "First line.\n")
    proposal = target_proposal(rt_gemma, context, _ended(b"\nThe second line."))
    assert _spelled(rt_gemma, proposal) == b"\nThe second line."
    assert proposal[0] != nl2[0]


def test_drafted_special_token_names_stay_text(rt_q4_1: ModelRuntime) -> None:
    end_of_turn = rt_q4_1.tokenize("<|im_end|>", add_special=False, parse_special=True)
    assert len(end_of_turn) == 1  # SmolLM2's own special token when parsed
    context = _tokens(rt_q4_1, "Write the tag:")
    proposal = target_proposal(rt_q4_1, context, _ended(b" <|im_end|> done."))
    assert end_of_turn[0] not in proposal
    assert _spelled(rt_q4_1, proposal) == b" <|im_end|> done."


def test_each_model_keeps_its_own_begin_of_text(
    rt_gemma: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    assert rt_gemma.add_bos and not rt_q4_1.add_bos
    # Gemma target, SmolLM2 draft: Gemma's BOS is not written into the text.
    smol_side = DraftContext(rt_gemma, rt_q4_1)
    view = smol_side.sync(rt_gemma.tokenize("Hello there", add_special=True))
    assert smol_side.text == b"Hello there"
    assert view.tokens == _tokens(rt_q4_1, "Hello there")
    # SmolLM2 target, Gemma draft: Gemma's context starts with its own BOS.
    gemma_side = DraftContext(rt_q4_1, rt_gemma)
    view = gemma_side.sync(_tokens(rt_q4_1, "Hello there"))
    assert view.tokens == [rt_gemma.bos_token, *_tokens(rt_gemma, "Hello there")]


def test_control_tokens_reach_the_draft_as_their_names(
    rt_q4_1: ModelRuntime, rt_gemma: ModelRuntime
) -> None:
    rendered = ChatTemplate.for_model(rt_q4_1).render([Message("user", "Hi")])
    context = rt_q4_1.tokenize(rendered, add_special=False, parse_special=True)
    side = DraftContext(rt_q4_1, rt_gemma)
    side.sync(context)
    assert side.text == rendered.encode()  # "<|im_start|>user\nHi<|im_end|>\n..."


def test_a_character_cut_by_byte_tokens_waits_for_its_last_byte(
    rt_q4_1: ModelRuntime, rt_gemma: ModelRuntime
) -> None:
    # SmolLM2 writes the emoji as three byte tokens; Gemma as one token.
    emoji = _tokens(rt_q4_1, "Nice 😀")
    assert len(_tokens(rt_q4_1, "😀")) == 3
    side = DraftContext(rt_q4_1, rt_gemma)
    cut = side.sync(emoji[:-1])  # the character's last byte not committed yet
    assert side.text.endswith(b"\xf0\x9f\x98")
    assert _spelled(rt_gemma, cut.tokens[1:]) == b"Nice "  # only whole characters
    # A draft that finishes the character: only what follows it is new text.
    drafted = _tokens(rt_gemma, "😀 Great!")
    text = side.drafted_text(cut, drafted)
    assert (text.text, text.ended) == (b"\x80 Great!", False)
    assert text.settled == len(b"\x80 Great")  # the last token, "!", is a lookahead
    # A proposal of bytes that end inside a character drops the part.
    proposal = target_proposal(rt_q4_1, emoji[:-1], _ended(b"\x80 ok \xf0\x9f"))
    assert _spelled(rt_q4_1, proposal) == b"\x80 ok "
    whole = side.sync(emoji)
    assert _spelled(rt_gemma, whole.tokens[1:]) == "Nice 😀".encode()


def test_the_draft_context_follows_edits_by_re_tokenizing_only_its_tail(
    rt_q4_1: ModelRuntime, rt_gemma: ModelRuntime
) -> None:
    """Appends and rejections in any order: the draft's tokens always spell
    the committed text, equal a fresh tokenization of it, and cost only the
    bytes near the change."""
    text = (
        "The river rises in the hills.\n\n  It flows east, past 12 mills; "
        "def f(x):\n    return x * 2\n\n😀 done — café, naïve.\t end"
    )
    full = _tokens(rt_q4_1, text)
    side = DraftContext(rt_q4_1, rt_gemma)
    rng = random.Random(7)
    n = 0
    work = 0
    for _ in range(60):
        n = max(0, min(len(full), n + rng.choice([1, 2, 3, 5, -1, -3])))
        before = side.n_retokenized
        view = side.sync(full[:n])
        work += side.n_retokenized - before
        written = _spelled(rt_q4_1, full[:n])
        fresh = DraftContext(rt_q4_1, rt_gemma).sync(full[:n])
        assert _spelled(rt_gemma, view.tokens[1:]) == written[: view.n_text]
        assert view.tokens == fresh.tokens, n
    # Tokenizing the whole text at every step would read ~60 x half of it.
    assert work < 60 * len(text.encode()) / 4


def test_a_token_the_draft_would_not_have_made_is_written_again_first(
    rt_gemma_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    """Token healing: Gemma commits "    " after a newline, which SmolLM2's
    tokenizer reads as one token "\\n    " it would never produce before a
    word ("\\n   " + " return" is its own way). Shown that token, it drafted
    a second newline; held back and written again first, it drafts on."""
    target = rt_gemma_q8_0
    head = (
        'def write_rows(path, rows):\n    """Write dictionaries to a CSV file, one row each."""\n'
    )
    context = target.tokenize(head, add_special=True, parse_special=False)
    context += _tokens(target, "    ")
    drafter = TextDraftDrafter(target, rt_q4_1)
    view = drafter.text.sync(context)
    assert rt_q4_1.token_piece(view.tokens[-1]) == b"\n    "  # (after '"""')
    healed = view.healed(rt_q4_1)
    assert healed.withheld == b"\n    " and healed.tokens == view.tokens[:-1]
    writers = drafter.pieces.writing(b"\n    ")
    pieces = {rt_q4_1.token_piece(int(t)) for t in writers}
    assert b"\n   " in pieces and b"\n    " in pieces  # a start of it, or all of it
    assert all(b"\n    ".startswith(p) or p.startswith(b"\n    ") for p in pieces)
    proposal = drafter.draft(context, 6, GREEDY, np.random.default_rng(0))
    written = _spelled(target, list(proposal.tokens))
    assert written and not written.startswith(b"\n"), written


# -------------------------------------------------------------- end to end
PROMPTS = [
    "Repeat this list exactly, one item per line: apple, pear, plum, cherry, apple, pear.",
    "Rewrite in the past tense: I walk to the market, I buy bread, and I go home.",
    "Explain in three sentences why the sky is blue.",
]
RAW_PROMPTS = [
    "def celsius_to_fahrenheit(celsius):\n    return celsius * 9 / 5 + 32\n\n\n"
    "def fahrenheit_to_celsius(fahrenheit):\n",
    "The honey bee is a flying insect that lives in large colonies. The workers",
]


def _chat_prompt(rt: ModelRuntime, text: str) -> list[int]:
    rendered = ChatTemplate.for_model(rt).render([Message("user", text)])
    return rt.tokenize(rendered, add_special=False)


def _reply(decoder: SpeculativeDecoder, prompt: list[int]) -> tuple[list[int], int, int]:
    rounds = list(decoder.generate(prompt, CONFIG))
    drafted = sum(r.n_drafted for r in rounds)
    accepted = sum(r.n_accepted for r in rounds)
    return [t for r in rounds for t in r.tokens], drafted, accepted


def test_greedy_chat_with_a_gemma_draft_is_token_identical(
    rt_q8_0: ModelRuntime, rt_gemma: ModelRuntime
) -> None:
    plain = SpeculativeDecoder(rt_q8_0)
    spec = SpeculativeDecoder(rt_q8_0, TextDraftDrafter(rt_q8_0, rt_gemma), FixedGamma(5))
    accepted = 0
    for text in PROMPTS:
        prompt = _chat_prompt(rt_q8_0, text)
        reference, _, _ = _reply(plain, prompt)
        tokens, drafted, n_accepted = _reply(spec, prompt)
        assert tokens == reference, text
        assert drafted > 0
        accepted += n_accepted
    assert accepted > 0


def test_greedy_completion_of_a_gemma_target_is_token_identical(
    rt_gemma_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    plain = SpeculativeDecoder(rt_gemma_q8_0)
    drafter = TextDraftDrafter(rt_gemma_q8_0, rt_q4_1)
    spec = SpeculativeDecoder(rt_gemma_q8_0, drafter, FixedGamma(4))
    accepted = 0
    for text in RAW_PROMPTS:
        prompt = rt_gemma_q8_0.tokenize(text, add_special=True, parse_special=False)
        reference, _, _ = _reply(plain, prompt)
        tokens, _, n_accepted = _reply(spec, prompt)
        assert tokens == reference, text
        accepted += n_accepted
    # The code prompt continues a pattern both models know: most drafts land.
    assert accepted > len(RAW_PROMPTS) * CONFIG.max_tokens // 4


def test_after_a_rejection_the_draft_proposes_as_a_fresh_one_would(
    rt_gemma_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    """Acceptance holds reply-long: a drafter whose last proposals were
    rejected (its cache and its text hold them) proposes exactly what a
    drafter that never saw them proposes, decoding only the changed tail."""
    target = rt_gemma_q8_0
    text = RAW_PROMPTS[0] + '    """Convert a temperature from Fahrenheit to Celsius."""\n'
    context = target.tokenize(text, add_special=True, parse_special=False)
    rng = np.random.default_rng(0)
    drafter = TextDraftDrafter(target, rt_q4_1)
    for cut in range(len(context) - 12, len(context) + 1, 3):
        # Committed up to `cut`; a proposal past it, then rejected: the target
        # went another way (a token of its own, then the real text again).
        seen = drafter.draft(context[:cut], 8, GREEDY, rng)
        assert seen.tokens
        wrong = _tokens(target, " banana")
        drafter.draft(context[:cut] + wrong, 8, GREEDY, rng)
        again = drafter.draft(context[:cut], 8, GREEDY, rng)
        fresh = TextDraftDrafter(target, rt_q4_1).draft(context[:cut], 8, GREEDY, rng)
        assert again.tokens == fresh.tokens == seen.tokens, cut
        assert again.n_synced <= 8  # the changed tail, not the whole context


def test_the_chains_playback_records_are_what_fixed_gamma_rounds_land(
    rt_q8_0: ModelRuntime, rt_gemma: ModelRuntime
) -> None:
    """``foresight.text_chains`` (what ``bench --playback`` records of a draft
    through text) drafts the chain from every reply position; a fixed-γ reply
    through the decoder lands, round by round, as many of its drafts as the
    chain recorded at that round's position does."""
    prompt = _chat_prompt(rt_q8_0, PROMPTS[0])
    reference, _, _ = _reply(SpeculativeDecoder(rt_q8_0), prompt)
    runs, chains = text_chains(TextDraftDrafter(rt_q8_0, rt_gemma), prompt, reference, 8)
    assert len(runs) == len(chains) == len(reference)
    assert runs[0] == 0 and chains[0] == ()
    assert all(0 <= run <= len(chain) <= 8 for run, chain in zip(runs, chains, strict=True))
    assert all(0.0 <= c <= 1.0 for chain in chains for c in chain)
    assert sum(runs) > len(reference)  # (a list to repeat: most chains land several)
    spec = SpeculativeDecoder(rt_q8_0, TextDraftDrafter(rt_q8_0, rt_gemma), FixedGamma(4))
    position, compared, agreed = 0, 0, 0
    for rnd in spec.generate(prompt, CONFIG):
        if rnd.n_drafted and position > 0:
            compared += 1
            agreed += rnd.n_accepted == min(rnd.n_drafted, runs[position])
        position += len(rnd.tokens)
    assert position == len(reference)
    assert compared >= 5 and agreed == compared
