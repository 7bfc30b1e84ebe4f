"""The round loop's bookkeeping (stops, max tokens, a full context, cancel,
the KV cache cut back after each round) on a small numpy target.

The real-weights tests (tests/integration/test_lossless.py and others) show
the loop on llama.cpp; these pin the edge cases of every step quickly, with a
target whose next-token logits depend on the previous token only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.base import EMPTY_DRAFT, ConfidenceCut, Draft, Option
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import FloatRows
from gambit.engine.text.reply import GenerationConfig, Round, StopReason
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import ContextOverflowError

VOCAB = 12
EOG = 11
GREEDY = SamplingParams(temperature=0.0, seed=7)


class BigramTarget:
    """A target whose logits after token t are row t of a fixed table; a KV
    cache that is the list of decoded tokens, with the same rules as
    ModelRuntime (a context limit, logits rows for the last n tokens)."""

    def __init__(self, table: np.ndarray, n_ctx: int = 256) -> None:
        self.table = table.astype(np.float32)
        self.n_ctx = n_ctx
        self.n_batch = 64
        self.n_seq_max = 1
        self.kv_tokens: list[int] = []
        self.abort: threading.Event | None = None
        self.batches: list[int] = []  # size of every decode, for the tests
        self._rows = np.zeros((0, VOCAB), dtype=np.float32)

    def decode(self, tokens: list[int], *, all_logits: bool = False, n_logits: int = 0) -> int:
        if not tokens:
            return 0
        if len(self.kv_tokens) + len(tokens) > self.n_ctx:
            raise ContextOverflowError("full")
        self.kv_tokens.extend(tokens)
        self.batches.append(len(tokens))
        n = len(tokens) if all_logits else max(1, min(n_logits, len(tokens)))
        self._rows = self.table[tokens[-n:]]
        return n

    def logits_rows(self, n_rows: int) -> FloatRows:
        return self._rows[:n_rows]

    def truncate(self, n_keep: int) -> None:
        del self.kv_tokens[n_keep:]

    def decode_tree(
        self, roots: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> int:
        raise AssertionError("chains only here")

    def commit_tree(self, n_main: int) -> None:
        raise AssertionError("chains only here")

    def is_eog(self, token: int) -> bool:
        return token == EOG

    def token_piece(self, token: int) -> bytes:
        return b"abcdefghijk#"[token : token + 1]

    def greedy_next(self, token: int) -> int:
        return int(np.argmax(self.table[token]))


def cycle_table(order: Sequence[int]) -> np.ndarray:
    """Greedy decoding walks ``order`` in a cycle (the last entry leads back
    to the first); every other token leads to ``order[0]``."""
    table = np.zeros((VOCAB, VOCAB))
    for t in range(VOCAB):
        table[t, order[0]] = 1.0
    for a, b in zip(order, [*order[1:], order[0]], strict=True):
        table[a] = 0.0
        table[a, b] = 1.0
    return table


class ScriptedDrafter:
    """Proposes the target's own greedy continuation (``right``) or a wrong
    token at a given position; counts what it was asked."""

    name = "scripted"

    through_text = copies_text = False
    steps_per_token = 1.0
    draft_model = None

    def __init__(self, target: BigramTarget, wrong_at: int | None = None, bucket: int = 0) -> None:
        self.target = target
        self.wrong_at = wrong_at
        self._option: Option | None = Option(self.name, bucket)
        self.asked: list[int] = []

    def option(self, context: list[int]) -> Option | None:
        return self._option

    def set_history(self, history: object) -> None:
        pass

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        cut: ConfidenceCut | None = None,
    ) -> Draft:
        self.asked.append(n_max)
        out: list[int] = []
        tok = context[-1]
        for i in range(n_max):
            tok = self.target.greedy_next(tok)
            out.append((tok + 1) % EOG if i == self.wrong_at else tok)
        return Draft(tuple(out)) if out else EMPTY_DRAFT

    def set_abort(self, event: threading.Event | None) -> None:
        pass

    def prepare(self, context: list[int]) -> None:
        pass

    def behind(self, context: list[int]) -> int:
        return 0

    def close(self) -> None:
        pass


class RecordingPolicy(FixedGamma):
    def __init__(self, gamma: int) -> None:
        super().__init__(gamma)
        self.options: list[Option | None] = []
        self.observed: list[Round] = []

    def decide_gamma(self, option: Option | None = None) -> int:
        self.options.append(option)
        return self.gamma

    def observe(self, rnd: Round) -> None:
        self.observed.append(rnd)


def run(decoder: SpeculativeDecoder, prompt: list[int], **config: object) -> list[Round]:
    cfg = GenerationConfig(**{"sampling": GREEDY, **config})  # type: ignore[arg-type]
    return list(decoder.generate(prompt, cfg))


def tokens_of(rounds: list[Round]) -> list[int]:
    return [t for r in rounds for t in r.tokens]


CYCLE = [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("wrong_at", [None, 0, 1, 3])
def test_speculation_gives_the_plain_greedy_tokens(gamma: int, wrong_at: int | None) -> None:
    target = BigramTarget(cycle_table(CYCLE))
    plain = tokens_of(run(SpeculativeDecoder(target), [1, 2], max_tokens=30))
    target.kv_tokens.clear()
    drafter = ScriptedDrafter(target, wrong_at=wrong_at)
    rounds = run(SpeculativeDecoder(target, drafter, FixedGamma(gamma)), [1, 2], max_tokens=30)
    assert tokens_of(rounds) == plain == [(i % 7) + 1 for i in range(2, 32)]
    for r in rounds:
        expected = gamma if wrong_at is None else min(wrong_at, gamma)
        if r.stop is None:
            assert r.n_accepted == expected


def test_cache_holds_the_committed_tokens_but_the_last_after_every_round() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    decoder = SpeculativeDecoder(target, ScriptedDrafter(target, wrong_at=2), FixedGamma(4))
    prompt = [3, 4, 5]
    committed = list(prompt)
    for rnd in decoder.generate(prompt, GenerationConfig(max_tokens=20, sampling=GREEDY)):
        committed.extend(rnd.tokens)
        assert target.kv_tokens == committed[:-1]
        # one batch per round: the last committed token and the drafts
        assert target.batches[-1] == 1 + rnd.n_drafted
    assert decoder.context == committed


def test_max_tokens_cuts_a_round_that_accepted_more() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    decoder = SpeculativeDecoder(target, ScriptedDrafter(target), FixedGamma(8))
    rounds = run(decoder, [1], max_tokens=5)
    assert len(tokens_of(rounds)) == 5
    assert rounds[-1].stop is StopReason.MAX_TOKENS
    # the policy's γ was cut to what the reply had room for: 4 drafts + 1
    assert decoder.drafter is not None
    assert decoder.drafter.asked == [4]  # type: ignore[attr-defined]


def test_end_of_text_inside_accepted_drafts_stops_there() -> None:
    target = BigramTarget(cycle_table([1, 2, 3, EOG]))
    rounds = run(SpeculativeDecoder(target, ScriptedDrafter(target), FixedGamma(8)), [1])
    assert tokens_of(rounds) == [2, 3, EOG]
    assert rounds[-1].stop is StopReason.EOG
    assert "".join(r.text for r in rounds) == "cd#"


def test_stop_string_across_rounds_hides_it_and_what_follows() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    # "b c d e f g h": stop at "fg", which a 2-token round splits
    decoder = SpeculativeDecoder(target, ScriptedDrafter(target), FixedGamma(1))
    rounds = run(decoder, [1], max_tokens=40, stop_strings=("fg",))
    assert "".join(r.text for r in rounds) == "cde"
    assert rounds[-1].stop is StopReason.STOP_STRING


def test_full_context_ends_the_reply_cleanly() -> None:
    target = BigramTarget(cycle_table(CYCLE), n_ctx=12)
    decoder = SpeculativeDecoder(target, ScriptedDrafter(target), FixedGamma(8))
    rounds = run(decoder, [1, 2, 3], max_tokens=100)
    assert rounds[-1].stop is StopReason.CONTEXT_FULL
    assert len(target.kv_tokens) <= 12
    assert max(target.batches) <= 12 - 3 + 1
    assert tokens_of(rounds)[:6] == [4, 5, 6, 7, 1, 2]


def test_prompt_as_long_as_the_context_is_refused() -> None:
    target = BigramTarget(cycle_table(CYCLE), n_ctx=4)
    with pytest.raises(ContextOverflowError, match="context holds 4"):
        run(SpeculativeDecoder(target), [1, 2, 3, 4])


def test_cancel_between_rounds() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    cancel = threading.Event()
    decoder = SpeculativeDecoder(target, ScriptedDrafter(target), FixedGamma(2))
    rounds = []
    for rnd in decoder.generate([1], GenerationConfig(max_tokens=100, sampling=GREEDY), cancel):
        rounds.append(rnd)
        if len(rounds) == 3:
            cancel.set()
    assert len(rounds) == 4
    assert rounds[-1].stop is StopReason.CANCELLED and rounds[-1].tokens == ()
    assert len(tokens_of(rounds)) == 9


def test_the_drafters_option_reaches_the_policy_and_none_skips_it() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    policy = RecordingPolicy(3)
    run(SpeculativeDecoder(target, ScriptedDrafter(target, bucket=4), policy), [1], max_tokens=8)
    assert policy.options and set(policy.options) == {Option("scripted", 4)}
    assert all(r.n_drafted for r in policy.observed[:-1])

    target.kv_tokens.clear()
    silent = RecordingPolicy(3)
    drafter = ScriptedDrafter(target)
    drafter._option = None  # nothing to propose: plain rounds, the policy not asked
    rounds = run(SpeculativeDecoder(target, drafter, silent), [1], max_tokens=8)
    assert silent.options == [] and drafter.asked == []
    assert [r.n_drafted for r in rounds] == [0] * 8
    assert len(silent.observed) == 8  # every round is still observed (costs, t1)


def test_speculation_switched_off_mid_reply_takes_effect_next_round() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    decoder = SpeculativeDecoder(target, ScriptedDrafter(target), FixedGamma(4))
    drafted = []
    for rnd in decoder.generate([1], GenerationConfig(max_tokens=30, sampling=GREEDY)):
        drafted.append(rnd.n_drafted)
        decoder.speculation_enabled = len(drafted) < 2
    assert drafted[:2] == [4, 4] and set(drafted[2:]) == {0}


def test_prompt_lookup_on_repeated_text_keeps_the_plain_tokens() -> None:
    target = BigramTarget(cycle_table(CYCLE))
    prompt = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3]
    plain = tokens_of(run(SpeculativeDecoder(target), prompt, max_tokens=24))
    target.kv_tokens.clear()
    rounds = run(
        SpeculativeDecoder(target, PromptLookupDrafter(), FixedGamma(6)), prompt, max_tokens=24
    )
    assert tokens_of(rounds) == plain
    assert sum(r.n_accepted for r in rounds) >= 18  # the cycle is in the prompt


class ReadingDrafter(ScriptedDrafter):
    """A drafter that must decode what it is behind on, as a draft model does."""

    def __init__(self, target: BigramTarget, behind: int) -> None:
        super().__init__(target)
        self._behind = behind
        self.read: list[int] = []  # the length of each context it was asked to read

    def behind(self, context: list[int]) -> int:
        return self._behind

    def prepare(self, context: list[int]) -> None:
        self.read.append(len(context))
        self._behind = 0


def test_the_first_token_does_not_wait_for_a_drafter_that_must_read() -> None:
    target = BigramTarget(cycle_table([1, 2, 3, 4, 5]))
    drafter = ReadingDrafter(target, behind=40)
    decoder = SpeculativeDecoder(target, drafter, FixedGamma(3))
    rounds = list(decoder.generate([1, 2, 3], GenerationConfig(max_tokens=12, sampling=GREEDY)))
    # The first round is plain, with the target's prompt processing before it ...
    assert rounds[0].n_drafted == 0 and len(rounds[0].tokens) == 1
    assert rounds[0].t_prompt_s > 0
    # ... the drafter reads the prompt and the first token (all but the last,
    # which its first draft decodes), counted as prompt processing, then drafts.
    assert drafter.read == [3] and drafter.asked[:1] == [3]
    assert rounds[1].t_prompt_s > 0 and rounds[1].n_drafted == 3
    assert all(r.t_prompt_s == 0 for r in rounds[2:])


def test_a_drafter_a_round_s_catch_up_behind_drafts_in_the_first_round() -> None:
    target = BigramTarget(cycle_table([1, 2, 3, 4, 5]))
    drafter = ReadingDrafter(target, behind=2)  # it holds all but the new turn's last tokens
    decoder = SpeculativeDecoder(target, drafter, FixedGamma(3))
    rounds = list(decoder.generate([1, 2, 3], GenerationConfig(max_tokens=12, sampling=GREEDY)))
    assert rounds[0].n_drafted == 3


def test_nothing_is_read_when_no_draft_could_follow() -> None:
    target = BigramTarget(cycle_table([1, 2, 3, 4, 5]))
    drafter = ReadingDrafter(target, behind=40)
    decoder = SpeculativeDecoder(target, drafter, FixedGamma(3))
    rounds = list(decoder.generate([1, 2, 3], GenerationConfig(max_tokens=2, sampling=GREEDY)))
    assert [len(r.tokens) for r in rounds] == [1, 1]
    assert drafter.read == [] and drafter.asked == []  # a 2-token reply drafts nothing
