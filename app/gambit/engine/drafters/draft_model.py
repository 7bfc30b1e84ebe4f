"""A second, smaller GGUF with the target's tokenizer drafts token by token.

(A draft with another tokenizer drafts through text: ``text_draft``.)
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gambit.engine.drafters.base import (
    EMPTY_DRAFT,
    ConfidenceCut,
    Draft,
    Option,
    top_probability,
)
from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.drafters.vocabulary import Vocabulary, vocabulary_differences
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.machine.tokens import common_prefix_length
from gambit.engine.verification.sampling import Distribution, SamplingParams, process
from gambit.engine.verification.tree import DraftTree, chain_tree
from gambit.errors import IncompatibleDraftError


def vocabulary_difference(target: ModelRuntime, draft: ModelRuntime) -> str | None:
    """Why ``draft`` cannot draft for ``target`` token for token (None: it can):
    the first finding of the one rule (``gambit.engine.drafters.vocabulary``).
    A draft that differs drafts through text instead (``text_draft``)."""
    found = vocabulary_differences(Vocabulary.of_runtime(target), Vocabulary.of_runtime(draft))
    return found[0] if found else None


def check_compatible(target: ModelRuntime, draft: ModelRuntime) -> None:
    """Raise ``IncompatibleDraftError`` with the reason unless ``draft`` shares
    ``target``'s vocabulary (as a derived draft must: layer skip, re-quantized)."""
    reason = vocabulary_difference(target, draft)
    if reason is not None:
        raise IncompatibleDraftError(
            f"{draft.path.name} cannot draft for {target.path.name} token for token: "
            f"{reason}. A draft derived from a model must keep its tokenizer."
        )


@dataclass
class _Run:
    n_synced: int
    t_synced_s: float  # the catch-up's share of the drafting time
    tokens: list[int] = field(default_factory=list)
    q: list[Distribution] = field(default_factory=list)
    conf: list[float] = field(default_factory=list)  # the draft's probability of each token
    sure: list[float] = field(default_factory=list)  # its top probability at each (a chain's)
    alts: list[list[tuple[int, float, Distribution | None]]] = field(default_factory=list)


# Context a draft's cache may hold, short of its size: room for a draft (a
# prompt read whole leaves it; so does a text draft's moving window).
DRAFT_ROOM = 64


class DraftModelDrafter:
    """Drafts with a small model, one decode per drafted token.

    The draft's KV cache follows the committed context lazily: each call
    syncs it to the context (keeping the common prefix, so after a partial
    acceptance only the rejected tail is dropped and only the new tokens are
    decoded), then decodes its own proposals.

    After a long stretch of plain decoding (speculation switched off, then a
    probe), catching up on every skipped token would cost more than the probe
    can win; beyond ``max_catch_up`` missing tokens the draft restarts on the
    last ``window`` tokens of the context instead. Its proposals may then be a
    little worse, never wrong: verification decides what is kept.
    """

    name = "draft model"
    MAX_SIDE_PER_DEPTH = 3  # runner-up candidates considered at one position
    # Traits (``Drafter``): a model of the target's vocabulary, a step a token.
    through_text = False
    copies_text = False
    steps_per_token = 1.0

    def __init__(
        self,
        runtime: ModelRuntime,
        sampling: SamplingParams | None = None,
        max_catch_up: int = 256,
        window: int = 256,
    ) -> None:
        self.runtime = runtime
        self.max_catch_up = max_catch_up
        self.window = window
        self._offset = 0  # context index of the draft cache's first token
        # The draft's own sampling settings. Default: the generation's, which
        # maximises acceptance; any other choice stays lossless (verification
        # corrects for whatever q the draft proposes from).
        self.sampling = sampling

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        cut: ConfidenceCut | None = None,
    ) -> Draft:
        sampling = self.sampling or sampling
        run = self._run(context, n_max, sampling, rng, n_alt=0, cut=cut)
        if run is None:
            return EMPTY_DRAFT
        q = None if sampling.greedy else run.q
        return Draft(tuple(run.tokens), q, run.n_synced, run.t_synced_s, tuple(run.sure))

    def draft_picked(
        self, context: list[int], n_max: int, pick: Callable[[np.ndarray], int | None]
    ) -> Draft:
        """Up to ``n_max`` tokens, each the one ``pick`` chooses from its logits
        row (a deterministic drafter: point masses; ``TextDraftDrafter``'s
        greedy steps that first write a held-back token again), until it
        chooses none."""
        started = self._start(context, n_max)
        if started is None:
            return EMPTY_DRAFT
        run, n_max = started

        def step(row: np.ndarray, _: list[int]) -> Distribution | None:
            token = pick(row)
            return None if token is None else Distribution.point(token)

        self._decode_chain(run, n_max, step, lambda: 0.0)
        return Draft(tuple(run.tokens), None, run.n_synced, run.t_synced_s)

    def draft_checked(
        self,
        context: list[int],
        proposal: tuple[int, ...],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        """``proposal`` (prompt lookup's copy) as far as this model agrees with
        it, then this model's own continuation, up to ``n_max`` tokens.

        The model reads the proposal in one batch with what it must catch up
        on anyway, which costs about one draft step instead of one per token
        (measured, F32 ×4 + Q4_1 SmolLM2: a batch of 16 ~40 ms against ~11 ms
        a step), and keeps each copied token while it is the model's own top
        choice: a copy that strays from the text the model expects (lookup
        matched boilerplate, then the reply moved on) is cut where it strays,
        before the target spends a verification on it. Where it strays, the
        model's token follows and the model drafts on from there.

        Lossless: a kept copied token is a point mass (whether it is kept
        depends on the context alone); every token the model drew carries its
        distribution.
        """
        sampling = self.sampling or sampling
        rt = self.runtime
        view = self._view(context)
        n_max = min(n_max, rt.n_ctx - len(view))
        proposal = proposal[: max(0, n_max - 1)]  # room for the model's next token
        if n_max <= 0:
            return EMPTY_DRAFT
        if not proposal:
            return self.draft(context, n_max, sampling, rng)
        t0 = time.perf_counter()
        keep = min(common_prefix_length(rt.kv_tokens, view), len(view) - 1)
        rt.truncate(keep)
        pending = view[keep:]
        rows: np.ndarray
        if len(pending) + len(proposal) <= rt.n_batch:
            rt.decode([*pending, *proposal], n_logits=len(proposal) + 1)
            rows = rt.logits_rows(len(proposal) + 1)
        else:  # a long catch-up first (after a restart), then the proposal
            rt.decode(pending)
            first = rt.logits(-1).copy()
            rt.decode(list(proposal), all_logits=True)
            rows = np.vstack([first, rt.logits_rows(len(proposal))])
        t_synced = time.perf_counter() - t0
        distribution = self._distribution(view, sampling)
        tokens: list[int] = []
        q: list[Distribution] = []
        for i, copied in enumerate(proposal):
            dist = distribution(rows[i], tokens)
            if copied != int(dist.ids[int(np.argmax(dist.probs))]):
                break
            tokens.append(copied)
            q.append(Distribution.point(copied))
            if rt.is_eog(copied):
                return self._checked(tokens, q, sampling, len(pending), t_synced)
        # The model's own token where the copy strayed (or past its end), then on.
        row = rows[len(tokens)].copy()
        rt.truncate(len(view) + len(tokens))
        run = _Run(len(pending), t_synced, tokens, q)
        self._decode_chain(run, n_max, distribution, rng.random, first_row=row)
        return self._checked(tokens, q, sampling, len(pending), t_synced)

    @staticmethod
    def _checked(
        tokens: list[int],
        q: list[Distribution],
        sampling: SamplingParams,
        n_synced: int,
        t_synced_s: float,
    ) -> Draft:
        return Draft(tuple(tokens), None if sampling.greedy else q, n_synced, t_synced_s)

    def draft_tree(
        self,
        context: list[int],
        depth: int,
        n_side: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The chain, plus side nodes where the draft was least sure.

        Side candidates cost no extra draft decodes: they are the draft's
        runner-up tokens at positions of the chain it has already computed
        (with a greedy draft, the next-best tokens by logit; otherwise tokens
        drawn without replacement from the draft's distribution). Each is
        scored by the draft's own estimate of the chance it is needed and
        right, P(reach its depth) × q(candidate), and the best ``n_side``
        go in.
        """
        sampling = self.sampling or sampling
        n_alt = min(n_side, self.MAX_SIDE_PER_DEPTH)
        run = self._run(context, depth, sampling, rng, n_alt)
        if run is None:
            return chain_tree((), None, 0)
        if n_alt == 0:
            chain_q = None if sampling.greedy else run.q
            return chain_tree(tuple(run.tokens), chain_q, run.n_synced, run.t_synced_s)
        # Best-first over (depth, rank): a rank joins only after the ranks
        # drawn before it at that depth (their order is what q_i assumes).
        reach = np.concatenate([[1.0], np.cumprod(run.conf)])
        heap = [(-reach[d] * alts[0][1], d, 0) for d, alts in enumerate(run.alts) if alts]
        heapq.heapify(heap)
        chosen: list[tuple[int, int]] = []
        while heap and len(chosen) < n_side:
            _, d, r = heapq.heappop(heap)
            chosen.append((d, r))
            if r + 1 < len(run.alts[d]):
                heapq.heappush(heap, (-reach[d] * run.alts[d][r + 1][1], d, r + 1))
        chosen.sort()
        tokens = list(run.tokens)
        parents = list(range(-1, len(tokens) - 1))
        q: list[Distribution] | None = None if sampling.greedy else list(run.q)
        for d, r in chosen:
            tok, _, dist = run.alts[d][r]
            tokens.append(tok)
            parents.append(d - 1)
            if q is not None:
                assert dist is not None
                q.append(dist)
        return DraftTree(
            tuple(tokens), tuple(parents), tuple(q) if q is not None else None,
            main_depth=len(run.tokens), n_synced=run.n_synced, t_synced_s=run.t_synced_s,
        )  # fmt: skip

    def _run(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        n_alt: int,
        cut: ConfidenceCut | None = None,
    ) -> _Run | None:
        """Draft a chain of up to ``n_max`` tokens, stopping where ``cut``
        says; with ``n_alt``, also note up to that many runner-up candidates
        at each position."""
        started = self._start(context, n_max)
        if started is None:
            return None
        run, n_max = started
        distribution = self._distribution(self._view(context), sampling)

        def step(row: np.ndarray, drafted: list[int]) -> Distribution | None:
            dist = distribution(row, drafted)
            if not n_alt:  # (a chain: the policy learns how its confidence lands)
                sure = self._top_prob(row, dist, sampling)
                if cut is not None and not cut.goes_on(sure):
                    return None  # (unsure from here: the draft stops)
                run.sure.append(sure)
            return dist

        def note(row: np.ndarray, dist: Distribution, tok: int) -> None:
            conf, alts = self._alternatives(row, dist, tok, sampling, rng, n_alt)
            run.conf.append(conf)
            run.alts.append(alts)

        self._decode_chain(run, n_max, step, rng.random, note if n_alt else None)
        return run

    def _start(self, context: list[int], n_max: int) -> tuple[_Run, int] | None:
        """The draft's cache synced to ``context`` for a chain of up to
        ``n_max`` tokens, and that many as room in the cache allows (None: no
        room for one)."""
        if n_max <= 0:
            return None
        rt = self.runtime
        view = self._view(context)
        n_max = min(n_max, rt.n_ctx - len(view))  # room left in the draft's cache
        if n_max <= 0:
            return None
        t0 = time.perf_counter()
        n_synced = rt.sync(view)
        return _Run(n_synced, time.perf_counter() - t0), n_max

    @staticmethod
    def _distribution(
        view: list[int], sampling: SamplingParams
    ) -> Callable[[np.ndarray, list[int]], Distribution]:
        """A step's distribution from its logits row and the tokens drafted so
        far (counted in the repeat penalty, with ``view``'s last)."""
        recent = view[-sampling.repeat_last_n :] if sampling.repeat_penalty != 1.0 else []
        return lambda row, drafted: process(row, sampling, recent + drafted if recent else ())

    def _decode_chain(
        self,
        run: _Run,
        n_max: int,
        step: Callable[[np.ndarray, list[int]], Distribution | None],
        draw: Callable[[], float],
        note: Callable[[np.ndarray, Distribution, int], None] | None = None,
        first_row: np.ndarray | None = None,
    ) -> None:
        """The one decode loop of a draft. From the cache's last logits row (or
        ``first_row``), ``step`` gives the next token's distribution (None:
        the draft stops), a token is drawn from it (``draw``: a uniform) and
        decoded, until ``run`` holds ``n_max`` tokens or the model ends its
        text; ``note`` sees each step (a tree's runner-ups)."""
        rt = self.runtime
        row = rt.logits(-1) if first_row is None else first_row
        while len(run.tokens) < n_max:
            dist = step(row, run.tokens)
            if dist is None:
                break
            tok = dist.sample(draw())
            run.tokens.append(tok)
            run.q.append(dist)
            if note is not None:
                note(row, dist, tok)
            if rt.is_eog(tok) or len(run.tokens) == n_max:
                break
            rt.decode([tok])
            row = rt.logits(-1)

    @staticmethod
    def _alternatives(
        row: np.ndarray,
        dist: Distribution,
        tok: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        n_alt: int,
    ) -> tuple[float, list[tuple[int, float, Distribution | None]]]:
        """The draft's confidence in ``tok`` and up to ``n_alt`` runner-ups as
        (token, probability, distribution it was drawn from; None: a point mass)."""
        if sampling.greedy:
            # Greedy: the next-best logits, deterministic proposals.
            top = np.argpartition(row, len(row) - n_alt - 1)[-(n_alt + 1) :]
            top = top[np.argsort(-row[top], kind="stable")]
            z = row.astype(np.float64)
            m = float(z.max())
            log_total = m + float(np.log(np.exp(z - m).sum()))
            probs = {int(t): float(np.exp(z[t] - log_total)) for t in top}
            alts_greedy: list[tuple[int, float, Distribution | None]] = [
                (int(t), probs[int(t)], None) for t in top if int(t) != tok
            ]
            return probs.get(tok, 0.0), alts_greedy[:n_alt]
        # Sampling: draw without replacement from what the draft proposes.
        alts: list[tuple[int, float, Distribution | None]] = []
        remaining = dist
        drawn = tok
        for _ in range(n_alt):
            keep = remaining.ids != drawn
            if not keep.any():
                break
            probs_left = remaining.probs[keep]
            remaining = Distribution(remaining.ids[keep], probs_left / probs_left.sum())
            drawn = remaining.sample(rng.random())
            alts.append((drawn, dist.prob(drawn), remaining))
        return dist.prob(tok), alts

    def option(self, context: list[int]) -> Option | None:
        return Option(self.name)  # its confidence is only known by drafting (a decode)

    @property
    def draft_model(self) -> DraftModelDrafter:
        return self

    def set_history(self, history: HistoryIndex | None) -> None:
        pass  # (it copies nothing)

    def set_abort(self, event: threading.Event | None) -> None:
        self.runtime.abort = event

    def prepare(self, context: list[int]) -> None:
        if context:
            # (no logits: the first draft decodes what follows for its own)
            self.runtime.sync(self._view(context, prompt=True), logits=False)

    def behind(self, context: list[int]) -> int:
        if not context:
            return 0
        offset, restart = self._plan_view(context, prompt=True)
        view = context[offset:]
        return len(view) if restart else self.runtime.decodes_to_sync(view)

    def _plan_view(self, context: list[int], prompt: bool = False) -> tuple[int, bool]:
        """Where in ``context`` the draft's cache should start, and whether
        that is a restart (catching up from the current start would read more
        than ``max_catch_up`` tokens: start again on the last ``window``).

        A prompt (``prepare``) is read whole wherever it fits with room to
        draft: a request's instruction sits at its start ("Summarise this
        document: ..."), and a draft that read only the document's last
        ``window`` tokens never saw it (measured on the document suite: the
        first drafts of a summary landed 0 of 12-16 tokens, the policy
        switched off for ~40 tokens; read whole they land from the first
        round). The window is for catching up mid-reply, where the reply so
        far says what comes next."""
        if prompt and len(context) + DRAFT_ROOM <= self.runtime.n_ctx:
            return 0, False
        offset = 0 if self._offset >= len(context) or len(context) <= self.window else self._offset
        view = context[offset:]
        missing = len(view) - common_prefix_length(self.runtime.kv_tokens, view)
        if missing > self.max_catch_up and len(context) > self.window:
            return len(context) - self.window, True
        return offset, False

    def _view(self, context: list[int], prompt: bool = False) -> list[int]:
        """The part of the context the draft's cache should hold."""
        self._offset, restart = self._plan_view(context, prompt)
        if restart:
            self.runtime.clear()
        return context[self._offset :]

    @staticmethod
    def _top_prob(row: np.ndarray, dist: Distribution, sampling: SamplingParams) -> float:
        return top_probability(row) if sampling.greedy else float(dist.probs.max())

    def close(self) -> None:
        self.runtime.close()
