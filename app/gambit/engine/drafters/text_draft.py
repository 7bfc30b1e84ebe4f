"""A draft model with a tokenizer of its own drafts through text.

Any much smaller model can draft for any target: the committed tokens are
turned into text and into the draft's tokens (``DraftContext``, re-tokenizing
only the tail that changed, so the draft's cache keeps its prefix), the draft
continues the text greedily in its own tokens, and the text it wrote is
tokenized with the target's vocabulary (``target_spans``) and proposed as
point masses, as prompt lookup's copies are.

Lossless at every temperature: the proposal depends on the committed context
alone (the draft is greedy, with no randomness of its own), and verification
checks a point mass x by accepting it with p(x) and resampling from p without
x otherwise, which emits exactly the target's distribution whatever x was.
Greedy is also the best a point mass can do: the chance it lands is p(x),
highest where x is the likeliest token, which the draft's argmax guesses.

What a round costs is measured as for any draft model, tokenizing included,
in two parts the policy prices apart (``per_round_seconds``,
``CostModel.observe_drafting``): what every round pays whatever its length,
and the draft steps per proposed target token. A pair whose text drafting
does not pay is switched off like any other.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from gambit.engine.drafters.base import (
    EMPTY_DRAFT,
    ConfidenceCut,
    Draft,
    Option,
    top_probability,
)
from gambit.engine.drafters.draft_model import DRAFT_ROOM, DraftModelDrafter
from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.drafters.text_align import (
    DraftContext,
    Drafted,
    DraftView,
    HealingPick,
    PieceIndex,
    Vocabulary,
    target_spans,
)
from gambit.engine.estimates import SHORT_CATCH_UP
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.verification.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)
# Draft steps per target token: its running mean's weight, and bounds.
RATIO_WEIGHT = 0.2
RATIO_MIN, RATIO_MAX = 0.25, 4.0
# When the draft's context outgrows its cache, its start moves on in steps of
# this share of the cache, so that rounds between two moves keep the cache.
SHIFT_SHARE = 0.25


class TextDraftDrafter:
    """Drafts for ``target`` with ``draft``, a model of another tokenizer,
    through text (see the module docstring). Chains only."""

    name = "draft model (through text)"
    # Traits (``Drafter``); its ``steps_per_token`` is measured (below).
    through_text = True
    copies_text = False

    def __init__(self, target: ModelRuntime, draft: ModelRuntime) -> None:
        self.target = target  # its tokenizer only: this drafter never decodes it
        self.model = DraftModelDrafter(draft, sampling=GREEDY)
        self.text = DraftContext(target, draft)
        self.pieces = PieceIndex(draft, draft.n_vocab)  # (token healing; ~1 s for 262k tokens)
        self._start = 0  # the draft's context begins at this of its tokens
        # Draft tokens per target token of the same text; measured on a sample
        # now, then on every draft.
        self.steps_per_token = _token_ratio(target, draft)

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        cut: ConfidenceCut | None = None,
    ) -> Draft:
        if n_max <= 0 or not context:
            return EMPTY_DRAFT
        t0 = time.perf_counter()
        view = self._view(context)
        tokens = self._window(view.tokens)
        t_text = time.perf_counter() - t0
        # The held-back token written again, the text of n_max target tokens,
        # and one draft token more: a lookahead that settles where the last
        # of them ends (Drafted.settled).
        steps_per_token = self.steps_per_token  # (this round's, before it learns)
        n_steps = math.ceil(n_max * steps_per_token) + 2
        t_picked = time.perf_counter()
        sure: list[float] = []  # the draft's confidence at each step
        pick = _confident(self.pieces.heal(view.withheld), cut, sure)
        drafted = self.model.draft_picked(tokens, n_steps, pick)
        t_steps = time.perf_counter() - t_picked - drafted.t_synced_s
        text = self.text.drafted_text(view, drafted.tokens)
        spans = target_spans(self.target, context, text)
        self._learn_ratio(len(drafted.tokens) - (1 if text.ended else 2), len(spans))
        spans = spans[:n_max]
        proposal = [tok for tok, _ in spans]
        if drafted.n_synced > SHORT_CATCH_UP:
            # A long catch-up: priced per token apart (CostModel.observe_drafting).
            t_fixed = drafted.t_synced_s + t_text
        else:
            t_fixed = per_round_seconds(
                time.perf_counter() - t0,
                t_steps,
                len(drafted.tokens) - 1,
                len(proposal),
                steps_per_token,
            )
        confidence = _token_confidence(self.text.draft, drafted.tokens, sure, text, spans)
        return Draft(tuple(proposal), None, drafted.n_synced, t_fixed, confidence)

    def _window(self, tokens: list[int]) -> list[int]:
        """The part of the draft's context its cache holds: all of it while it
        fits, then from a start that moves on in steps (``SHIFT_SHARE``)."""
        room = self.model.runtime.n_ctx - DRAFT_ROOM
        if len(tokens) <= room:
            self._start = 0
            return tokens
        step = max(1, int(room * SHIFT_SHARE))
        if self._start > len(tokens) or len(tokens) - self._start > room:
            self._start = ((len(tokens) - room) // step + 1) * step
        return tokens[self._start :]

    def _learn_ratio(self, n_steps: int, n_target: int) -> None:
        """Draft steps per target token, from a draft of ``n_steps`` (lookahead
        not counted) whose settled text made ``n_target`` target tokens."""
        if n_steps < 2 or n_target < 2:
            return
        seen = min(RATIO_MAX, max(RATIO_MIN, n_steps / n_target))
        self.steps_per_token += RATIO_WEIGHT * (seen - self.steps_per_token)

    def option(self, context: list[int]) -> Option | None:
        return Option(self.name)  # its confidence is only known by drafting

    @property
    def draft_model(self) -> TextDraftDrafter:
        return self

    def set_history(self, history: HistoryIndex | None) -> None:
        pass  # (it copies nothing)

    def prepare(self, context: list[int]) -> None:
        if context:
            self.model.prepare(self._window(self._view(context).tokens))

    def behind(self, context: list[int]) -> int:
        if not context:
            return 0
        return self.model.behind(self._window(self._view(context).tokens))

    def _view(self, context: list[int]) -> DraftView:
        """What the draft reads of ``context``: its last token held back (healed)."""
        return self.text.sync(context).healed(self.text.draft)

    def set_abort(self, event: threading.Event | None) -> None:
        self.model.set_abort(event)

    def close(self) -> None:
        self.model.close()


SAMPLE_TEXT = (
    "The committee met on Tuesday to review the budget. In 2023, costs rose by 4.5 % "
    "while income stayed flat.\n\ndef mean(values):\n    return sum(values) / len(values)\n"
)


def per_round_seconds(
    total_s: float, steps_s: float, n_steps: int, n_proposed: int, steps_per_token: float
) -> float:
    """What a round of drafting through text costs whatever its length: all of
    its ``total_s`` but the draft steps that wrote its proposal's tokens after
    the first (``steps_per_token`` of its ``n_steps`` steps, which took
    ``steps_s``, per target token).

    It is reported as the round's catch-up (``Draft.t_synced_s``), so the cost
    model prices it per round (``CostModel.observe_drafting``) and only the
    steps per token. Every round syncs the text, writes the held-back token
    again, drafts one token of lookahead and tokenizes what it wrote: counted
    into a short draft's few tokens, that made a γ=2 token look three times
    dearer than a γ=16 one, and the policy, seeing drafts dearer, drafted
    shorter ones until it switched off a pair on which fixed γ=8 ran 2x
    target-only (measured on Gemma-3-270M ×4 with SmolLM2 drafting).
    """
    if n_steps <= 0 or n_proposed <= 1:
        return total_s
    per_token = steps_s / n_steps * steps_per_token
    return total_s - min(steps_s, (n_proposed - 1) * per_token)


def _token_ratio(target: ModelRuntime, draft: ModelRuntime) -> float:
    """Draft tokens per target token on a sample of prose and code."""
    n_tgt = len(target.tokenize(SAMPLE_TEXT, add_special=False, parse_special=False))
    n_dft = len(draft.tokenize(SAMPLE_TEXT, add_special=False, parse_special=False))
    return min(RATIO_MAX, max(RATIO_MIN, n_dft / max(1, n_tgt)))


def _confident(
    pick: HealingPick, cut: ConfidenceCut | None, sure: list[float]
) -> Callable[[np.ndarray], int | None]:
    """``pick``, noting the draft's confidence at each step into ``sure`` and
    stopping where ``cut`` says, after one step more: the lookahead that
    settles where the text before it ends (the tokens it starts are not
    proposed). The steps that write held-back text again are not its
    guesses: they do not count (1.0)."""
    stop = False

    def picked(row: np.ndarray) -> int | None:
        nonlocal stop
        if pick.healing:
            sure.append(1.0)
            return pick(row)
        if stop:
            return None
        confidence = top_probability(row)
        stop = cut is not None and not cut.goes_on(confidence)
        sure.append(confidence)
        return pick(row)

    return picked


def _token_confidence(
    draft: Vocabulary,
    steps: Sequence[int],
    sure: Sequence[float],
    text: Drafted,
    spans: Sequence[tuple[int, int]],
) -> tuple[float, ...]:
    """The draft's confidence in each proposed target token (``spans``: each
    with where it ends in ``text``): the product of its confidence at the
    draft steps that wrote the token's text, up to the one that completes it."""
    ends: list[int] = []  # where each step's text ends, in text.text's offsets
    total = 0
    for tok in steps:
        piece = draft.token_piece(tok)
        if not piece:
            break
        total += len(piece)
        ends.append(total)
    skip = total - len(text.text)  # (what the steps wrote again of the committed text)
    confidence: list[float] = []
    j = 0
    for _, end in spans:
        product = 1.0
        while j < len(ends) and ends[j] - skip < end:
            product *= sure[j]
            j += 1
        if j < len(ends):
            product *= sure[j]
            j += 1
        confidence.append(product)
    return tuple(confidence)
