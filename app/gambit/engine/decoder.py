"""The round loop: draft -> verify -> accept -> trim KV, one ``Round`` event per round.

KV invariant: the target's cache holds the committed tokens but the last one
(after a tree round, but the last few: see below). A round decodes [last
committed, x_1 .. x_γ] in one batch, which yields the γ+1 distributions
p_1..p_{γ+1} that verification needs; afterwards the cache is cut back to the
committed tokens plus the accepted drafts. With γ = 0 the round is exactly
plain decoding: one token in, one token out.

Token trees: the batch is [last committed, every tree node], each node seeing
only its own branch. The cache keeps the accepted part of the main chain;
when a side branch won, its tokens are committed but not kept in the cache
(see ModelRuntime.commit_tree), and the next round's batch decodes them
again in front of its own tokens (``Round.n_catch_up``).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast

import numpy as np

from gambit.engine.drafters.base import EMPTY_DRAFT, ChoosingDrafter, Draft, Drafter, TreeDrafter
from gambit.engine.gamma.policy import DEFAULT_GAMMA, FixedGamma, GammaPolicy
from gambit.engine.machine.runtime import FloatRows, ModelRuntime
from gambit.engine.machine.threads import ThreadCount
from gambit.engine.machine.tokens import common_prefix_length
from gambit.engine.text.grammar import GrammarError, GrammarState, GrammarVocabulary
from gambit.engine.text.reply import GRAMMAR_SOURCE, GenerationConfig, Round, StopReason
from gambit.engine.text.text_stream import TextStream
from gambit.engine.verification.sampling import Distribution, SamplingParams, process
from gambit.engine.verification.tree import DraftTree
from gambit.engine.verification.verify import speculative_sample, verify_tree
from gambit.errors import ContextOverflowError, DecodeAbortedError

# A drafter at most this many tokens behind reads them within a round, as every
# round's catch-up does (the last draft and the bonus token); more, and the
# first token does not wait for it.
READ_IN_ROUND_MAX = 2


class _TargetRows(Sequence[Distribution]):
    """p_1..p_{γ+1}, processed lazily: verification stops reading at the first
    rejection. With a grammar, each row is masked to what the grammar allows
    after the drafts before it; it takes those drafts as the rows are read in
    order, so it ends the verification having taken the accepted ones."""

    def __init__(
        self,
        rows: FloatRows,
        sampling: SamplingParams,
        context: list[int],
        x: list[int],
        grammar: GrammarState | None = None,
    ) -> None:
        self._rows = rows
        self._sampling = sampling
        self._context = context
        self._x = x
        self._penalised = sampling.repeat_penalty != 1.0 and sampling.repeat_last_n > 0
        self._grammar = grammar
        self._masked: list[Distribution] = []  # rows read so far, with a grammar

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> Distribution:  # type: ignore[override]
        if self._grammar is not None and i < len(self._masked):
            return self._masked[i]
        recent = _recent(self._sampling, self._context, self._x[:i]) if self._penalised else ()
        if self._grammar is None:
            return process(self._rows[i], self._sampling, recent)
        while len(self._masked) < i:  # (rows are read in order: the drafts before i)
            self[len(self._masked)]
        if i > 0:
            self._grammar.advance(self._x[i - 1])  # (p_{i-1} accepted it: allowed)
        dist = process(self._rows[i], self._sampling, recent, self._grammar.allowed())
        self._masked.append(dist)
        return dist


class _TreeRows:
    """The target's distribution at each row of a tree batch, processed on demand."""

    def __init__(
        self, rows: FloatRows, sampling: SamplingParams, context: list[int], tree: DraftTree
    ) -> None:
        self._rows = rows
        self._sampling = sampling
        self._context = context
        self._tree = tree
        self._penalised = sampling.repeat_penalty != 1.0 and sampling.repeat_last_n > 0

    def __call__(self, row: int, path: Sequence[int]) -> Distribution:
        recent: Sequence[int] = ()
        if self._penalised:
            recent = _recent(self._sampling, self._context, [self._tree.tokens[i] for i in path])
        return process(self._rows[row], self._sampling, recent)


def _as_batch(rnd: Round) -> Round:
    """A round that began with tokens its grammar forced, as the policy learns
    from it: those tokens verified in the batch as a catch-up is, and the
    drafter's tokens after them (if any) as its draft."""
    n = rnd.n_forced  # (the grammar alone: all of the round's drafts)
    return replace(
        rnd, n_drafted=rnd.n_drafted - n, n_accepted=max(0, rnd.n_accepted - n),
        outcomes=rnd.outcomes[n:], gamma=max(0, rnd.gamma - n), main_outcomes=None,
        drafted_by="" if rnd.n_drafted == n else rnd.drafted_by, n_forced=0,
        n_catch_up=rnd.n_catch_up + n, confidence=rnd.confidence[n:],
    )  # fmt: skip


def _recent(sampling: SamplingParams, context: list[int], drafted: list[int]) -> list[int]:
    """The repetition penalty's window: the last tokens of context + drafted."""
    n = sampling.repeat_last_n
    return (context[-n:] + drafted)[-n:]


class Target(Protocol):
    """What the round loop needs of the target model. ``ModelRuntime`` is the
    real one; the unit tests drive the loop with a small numpy model."""

    n_ctx: int
    n_batch: int
    n_seq_max: int
    kv_tokens: list[int]
    abort: threading.Event | None

    def decode(self, tokens: list[int], *, all_logits: bool = False, n_logits: int = 0) -> int: ...

    def logits_rows(self, n_rows: int) -> FloatRows: ...

    def truncate(self, n_keep: int) -> None: ...

    def decode_tree(
        self, roots: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> int: ...

    def commit_tree(self, n_main: int) -> None: ...

    def is_eog(self, token: int) -> bool: ...

    def token_piece(self, token: int) -> bytes: ...


@dataclass
class _Verdict:
    """What verifying one round's draft decided."""

    accepted: list[int]  # draft tokens accepted, in order
    token: int  # the target's own token after them
    outcomes: tuple[bool, ...]
    n_drafted: int
    n_side: int = 0
    main_outcomes: tuple[bool, ...] | None = None


@dataclass
class _Reply:
    """The state of one generation between rounds."""

    context: list[int]  # committed tokens: prompt and reply so far
    stream: TextStream
    t_start: float
    sampling: SamplingParams
    rng: np.random.Generator  # target sampling and verification
    rng_draft: np.random.Generator  # the drafter's own proposals
    n_generated: int = 0
    index: int = 0
    # Whether the drafter read the prompt: None while undecided, False where
    # the policy found it would not pay.
    read: bool | None = None
    t_prompt_s: float = 0.0  # prompt processing not yet reported by a round
    source: str = ""  # what drafts the coming round (Round.drafted_by)
    choosing: bool = False  # the drafter is a ChoosingDrafter (asked once per reply)
    grammar: GrammarState | None = None  # where the reply stands in its grammar
    forced: tuple[int, ...] = ()  # the coming round's draft, forced by the grammar


class SpeculativeDecoder:
    """Runs generations on a target with an optional drafter.

    ``context`` holds the committed tokens of the last generation (prompt and
    reply), so a caller can continue a conversation from them.

    A round is five steps: plan (γ and side nodes, within what the context and
    the reply have room for), draft, verify (a chain or a tree), commit (cut
    the target's cache back to what was accepted) and stop (end of text, max
    tokens, stop strings).
    """

    def __init__(
        self,
        target: Target,
        drafter: Drafter | None = None,
        policy: GammaPolicy | None = None,
        threads: ThreadCount | None = None,
    ) -> None:
        """``threads``: the CPU threads of the target and the draft model,
        set between rounds as the load calls for (None: as loaded)."""
        self.target = target
        self.drafter = drafter
        self.policy: GammaPolicy = policy or FixedGamma(DEFAULT_GAMMA if drafter else 0)
        self.threads = threads
        self.context: list[int] = []
        # Read between rounds: flip speculation off/on mid-reply.
        self.speculation_enabled = True
        # Whether a grammar's forced tokens are drafted (False: the drafter's
        # alone, as the bench compares them).
        self.grammar_drafts = True
        self._grammar_vocab: GrammarVocabulary | None = None  # (the first grammar builds it)

    def generate(
        self,
        prompt: list[int],
        config: GenerationConfig,
        cancel: threading.Event | None = None,
        *,
        continues: int = 0,
    ) -> Iterator[Round]:
        """Stream the reply to ``prompt``. ``continues``: the prompt's last
        tokens that many are the start of this very reply, cut earlier
        (Continue): its text picks up after them, a character they split
        included."""
        t_start = time.perf_counter()
        self.context = []
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt is {len(prompt):,} tokens but the context holds "
                f"{self.target.n_ctx:,}: shorten it or raise the context size"
            )
        sampling = config.sampling
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(64)
        reply = _Reply(
            list(prompt),
            TextStream(config.stop_strings),
            t_start,
            sampling,
            rng=np.random.default_rng([seed, 0]),
            rng_draft=np.random.default_rng([seed, 1]),
        )
        if continues > 0:
            reply.stream.skip(b"".join(map(self.target.token_piece, prompt[-continues:])))
        if config.grammar is not None:  # (before the prompt: a grammar that fails, fails first)
            reply.grammar = self._grammar_vocabulary().state(config.grammar)
        try:
            self._follow_load(reply_start=True)
            self._prefill(prompt, cancel)
            self.policy.start_reply(len(prompt))
            reply.t_prompt_s = time.perf_counter() - t_start
            self.context = reply.context
            # Trees need a drafter that drafts them and a target with a KV
            # sequence per leaf; decided once, not every round.
            trees = self.target.n_seq_max > 1 and isinstance(self.drafter, TreeDrafter)
            trees = trees and reply.grammar is None  # (a grammar masks chains)
            reply.choosing = isinstance(self.drafter, ChoosingDrafter)
            while True:
                if cancel is not None and cancel.is_set():
                    yield self._final(reply, StopReason.CANCELLED)
                    return
                self._follow_load()
                rnd = self._round(reply, config, cancel, trees)
                if rnd is None:
                    yield self._final(reply, StopReason.CONTEXT_FULL)
                    return
                # (the tokens a grammar forced are, to the policy, part of the
                # batch it verified: their certain acceptance says nothing of a drafter's)
                self.policy.observe(_as_batch(rnd) if rnd.n_forced else rnd)
                yield rnd
                if rnd.stop is not None:
                    return
                reply.index += 1
        except DecodeAbortedError:  # Stop during the prompt or the drafter's reading of it
            yield self._final(reply, StopReason.CANCELLED)

    def _round(
        self,
        reply: _Reply,
        config: GenerationConfig,
        cancel: threading.Event | None,
        trees: bool,
    ) -> Round | None:
        """One round: plan, draft, verify, commit (None: the context is full)."""
        target = self.target
        pending = reply.context[len(target.kv_tokens) :]  # committed, not yet cached
        room = target.n_ctx - len(target.kv_tokens) - len(pending)  # slots for drafts
        if room < 0:
            return None
        ready = self._read_prompt(reply, config.max_tokens, cancel)
        reply.forced = ()  # (the plan's, if any)
        gamma, n_side = (
            self._plan(reply, config.max_tokens, room, len(pending), trees) if ready else (0, 0)
        )
        t0 = time.perf_counter()
        draft, tree = self._draft(reply, gamma, n_side)
        t1 = time.perf_counter()
        if tree is None:
            verdict = self._verify_chain(reply, pending, draft, gamma)
        else:
            verdict = self._verify_tree(reply, pending, tree)
        t2 = time.perf_counter()
        new, text, stop = self._commit(reply, verdict, config.max_tokens)
        if reply.grammar is not None and stop is None:
            reply.grammar.advance(verdict.token)  # (the drafts accepted: taken as verified)
        t_prompt_s, reply.t_prompt_s = reply.t_prompt_s, 0.0
        return Round(
            index=reply.index,
            tokens=tuple(new),
            text=text,
            gamma=gamma,
            n_drafted=verdict.n_drafted,
            n_accepted=len(verdict.accepted),
            outcomes=verdict.outcomes,
            t_draft_s=t1 - t0,
            t_verify_s=t2 - t1,
            elapsed_s=time.perf_counter() - reply.t_start,
            stop=stop,
            n_draft_synced=draft.n_synced,
            t_draft_synced_s=draft.t_synced_s,
            n_side=verdict.n_side,
            main_outcomes=verdict.main_outcomes,
            n_catch_up=len(pending) - 1,
            t_prompt_s=t_prompt_s,
            drafted_by=reply.source if verdict.n_drafted else "",
            n_forced=len(reply.forced),
            threads=self.threads.current if self.threads is not None else 0,
            confidence=draft.confidence,  # (a tree's: none)
        )

    def _grammar_vocabulary(self) -> GrammarVocabulary:
        """The target's tokens as grammars read them (built once, ~1 s)."""
        if self._grammar_vocab is None:
            if not isinstance(self.target, ModelRuntime):
                raise GrammarError("a grammar needs a llama.cpp model as the target")
            self._grammar_vocab = GrammarVocabulary(self.target)
        return self._grammar_vocab

    def _follow_load(self, *, reply_start: bool = False) -> None:
        """Decode on the threads the load leaves free (or as pinned); the policy
        prices rounds at the count in use (a no-op where it already does)."""
        if self.threads is not None:
            self.threads.follow(reply_start=reply_start)
            self.policy.at_threads(self.threads.current)

    # -- the steps of a generation
    def _prefill(self, prompt: list[int], cancel: threading.Event | None) -> None:
        """Put all of the prompt but its last token in the target's cache
        (reusing what it already holds). Stop / Ctrl-C / closing stop a long
        prompt midway (llama.cpp's abort callback): DecodeAbortedError."""
        target = self.target
        keep = min(len(prompt) - 1, common_prefix_length(target.kv_tokens, prompt))
        target.truncate(keep)
        target.abort = cancel
        try:
            target.decode(prompt[keep:-1])
        finally:
            target.abort = None

    def _read_prompt(self, reply: _Reply, max_tokens: int, cancel: threading.Event | None) -> bool:
        """Let the drafter read the prompt where the policy finds it pays; returns
        whether this round may draft as far as reading goes.

        The first token comes first: a drafter that must decode the prompt
        (a draft model) reads it after the first round, which decodes plainly,
        so the time to first token is the target's alone. Its reading is prompt
        processing all the same (``Round.t_prompt_s``). A drafter that reads
        for free (prompt lookup), or holds all but a round's usual catch-up
        (``READ_IN_ROUND_MAX``), may draft in the first round.
        """
        drafter = self.drafter
        if drafter is None or reply.read is not None or not self.speculation_enabled:
            return True
        n_read = drafter.behind(reply.context)
        if n_read > READ_IN_ROUND_MAX and reply.index == 0:
            return False
        remaining = max_tokens - reply.n_generated
        if remaining < 2:  # a draft needs a token of the target's after it: none to draft
            return True
        reply.read = self.policy.decide_reading(n_read, remaining)
        if not reply.read:
            return True  # the policy knows it sits this reply out
        t0 = time.perf_counter()
        drafter.set_abort(cancel)
        try:
            # All but the last token: the first draft decodes that one for its
            # logits, as every round's catch-up does.
            drafter.prepare(reply.context[:-1])
        finally:
            drafter.set_abort(None)
        seconds = time.perf_counter() - t0
        self.policy.observe_reading(n_read, seconds)
        reply.t_prompt_s += seconds
        return True

    def _plan(
        self, reply: _Reply, max_tokens: int, room: int, n_pending: int, trees: bool
    ) -> tuple[int, int]:
        """This round's γ and side nodes: the policy's, within the tokens the
        reply may still have, the context's free slots and the batch."""
        drafter = self.drafter
        if not self.speculation_enabled:
            return 0, 0
        if self.grammar_drafts and reply.grammar is not None:
            forced = reply.grammar.forced()
            if forced:  # (free and certain: drafted whatever the policy says)
                n = max(0, min(len(forced), max_tokens - reply.n_generated - 1, room))
                reply.forced, reply.source = forced[:n], GRAMMAR_SOURCE
                if n < len(forced):  # (no room after them)
                    return n, 0
        if drafter is None:
            return len(reply.forced), 0
        # After a forced stretch, the drafter goes on from where it ends.
        n_forced = len(reply.forced)
        context = [*reply.context, *reply.forced] if n_forced else reply.context
        if reply.choosing:
            choosing = cast(ChoosingDrafter, drafter)
            options = choosing.options(context)
            option = self.policy.choose(options) if options else None
            if option is not None:
                choosing.use(option)
        else:
            option = drafter.option(context)
        if option is None:  # nothing to propose: a plain round (or the forced stretch)
            return n_forced, 0
        remaining = max_tokens - reply.n_generated - n_forced
        gamma = max(0, min(self.policy.decide_gamma(option), remaining - 1, room - n_forced))
        if gamma > 0:
            reply.source = option.source
        if n_forced:
            return n_forced + gamma, 0
        if gamma == 0 or not trees:
            return gamma, 0
        n_side = min(
            self.policy.decided_side_nodes(),
            self.target.n_seq_max - 1,  # one KV sequence per leaf
            room - gamma,
            self.target.n_batch - n_pending - gamma,
        )
        return gamma, max(0, n_side)

    def _draft(self, reply: _Reply, gamma: int, n_side: int) -> tuple[Draft, DraftTree | None]:
        """The drafter's proposal: a chain, or a tree when side nodes were planned
        (None for the tree when it came back without side nodes)."""
        drafter = self.drafter
        forced = reply.forced
        cut = self.policy.decided_cut()
        if forced:  # the grammar's: point masses, verified in the batch
            if drafter is None or gamma <= len(forced):
                return Draft(forced), None
            after = drafter.draft([*reply.context, *forced], gamma - len(forced),
                                  reply.sampling, reply.rng_draft, cut)  # fmt: skip
            q = [*map(Distribution.point, forced), *after.q] if after.q is not None else None
            sure = (1.0,) * len(forced) + after.confidence if after.confidence else ()
            return Draft(forced + after.tokens, q, after.n_synced, after.t_synced_s, sure), None
        if drafter is None or gamma <= 0:
            return EMPTY_DRAFT, None
        if n_side > 0:
            assert isinstance(drafter, TreeDrafter)
            tree = drafter.draft_tree(reply.context, gamma, n_side, reply.sampling, reply.rng_draft)
            q = list(tree.q) if tree.q else None
            draft = Draft(tree.tokens, q, tree.n_synced, tree.t_synced_s)
            # Nothing to branch on: verify it as the chain it is.
            return draft, (tree if tree.n_side else None)
        return drafter.draft(reply.context, gamma, reply.sampling, reply.rng_draft, cut), None

    def _verify_chain(
        self, reply: _Reply, pending: list[int], draft: Draft, gamma: int
    ) -> _Verdict:
        """One batch of [pending, x_1..x_γ]: p_1..p_{γ+1}, rejection sampling,
        and the cache cut back to the committed tokens and the accepted drafts."""
        target, context, x = self.target, reply.context, list(draft.tokens[:gamma])
        n_rows = target.decode([*pending, *x], n_logits=len(x) + 1)
        p_i = _TargetRows(target.logits_rows(n_rows), reply.sampling, context, x, reply.grammar)
        verdict = speculative_sample(x, draft.q, p_i, reply.rng)
        target.truncate(len(context) + verdict.n_accepted)
        return _Verdict(x[: verdict.n_accepted], verdict.token, verdict.outcomes, len(x))

    def _verify_tree(self, reply: _Reply, pending: list[int], tree: DraftTree) -> _Verdict:
        """One batch of [pending, every tree node]; the cache keeps the accepted
        part of the main chain (an accepted side branch is re-decoded next round)."""
        target = self.target
        n_rows = target.decode_tree(pending, tree.tokens, tree.parents)
        p_at = _TreeRows(target.logits_rows(n_rows), reply.sampling, reply.context, tree)
        verdict = verify_tree(tree, p_at, reply.rng)
        path = verdict.path
        n_main = next((i for i, node in enumerate(path) if node != i), len(path))
        target.commit_tree(n_main)
        return _Verdict(
            [tree.tokens[i] for i in path],
            verdict.token,
            verdict.outcomes,
            len(tree.tokens),
            n_side=tree.n_side,
            main_outcomes=verdict.main_outcomes,
        )

    def _commit(
        self, reply: _Reply, verdict: _Verdict, max_tokens: int
    ) -> tuple[list[int], str, StopReason | None]:
        """Commit the round's tokens up to the first stop (end of text, max
        tokens, a stop string); returns them, the text they made visible, and
        the stop."""
        stop: StopReason | None = None
        new = [*verdict.accepted, verdict.token]
        for j, tok in enumerate(new):
            if self.target.is_eog(tok):
                new = new[: j + 1]
                stop = StopReason.EOG
                break
        remaining = max_tokens - reply.n_generated
        if len(new) >= remaining:
            new = new[:remaining]
            stop = stop or StopReason.MAX_TOKENS
        reply.context.extend(new)
        reply.n_generated += len(new)
        text, hit = reply.stream.feed(b"".join(self.target.token_piece(t) for t in new))
        if hit:
            stop = StopReason.STOP_STRING
        if stop is not None and not hit:
            # (cut by its length, it may be continued: see TextStream.finish)
            text += reply.stream.finish(whole=stop is StopReason.EOG)
        return new, text, stop

    @staticmethod
    def _final(reply: _Reply, stop: StopReason) -> Round:
        return Round(
            index=reply.index,
            tokens=(),
            text=reply.stream.finish(whole=False),  # (cancelled or the context full: cut)
            gamma=0,
            n_drafted=0,
            n_accepted=0,
            outcomes=(),
            t_draft_s=0.0,
            t_verify_s=0.0,
            elapsed_s=time.perf_counter() - reply.t_start,
            stop=stop,
        )
