"""The drafter protocol: propose up to n tokens that continue a context.

A drafter says what it can do (its traits: ``draft_model``, ``through_text``,
``steps_per_token``, ``copies_text``, ``set_history``; ``TreeDrafter`` and
``ChoosingDrafter`` for trees and several sources), and each round it offers
the policy an ``Option``: which of its sources would draft, in which bucket
of rounds, paid for how. Code outside ``engine/drafters/`` asks these, never
a drafter's class, so a new drafter is its module and a registry entry.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.verification.sampling import Distribution, SamplingParams
from gambit.engine.verification.tree import DraftTree


class SourceKind(enum.Enum):
    """How a drafter source's drafts are paid for: what a round costs and what
    its timings measure."""

    MODEL = "model"  # the draft model's steps, one per draft token
    FREE = "free"  # nothing now (prompt lookup); the draft model reads them later
    READ = "read"  # the draft model reads them in one batch (a copy it checks)


@dataclass(frozen=True, slots=True)
class Option:
    """One way to draft the coming round, as a drafter offers it: the source
    that drafts it (the round's ``drafted_by``), the bucket of that source's
    rounds it falls in (prompt lookup's match lengths; 0 for a source without
    such a signal), and how its drafts are paid for. Rounds of one option
    share what the policy learns of their acceptance."""

    source: str
    bucket: int = 0
    kind: SourceKind = SourceKind.MODEL


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: tuple[int, ...]
    # The proposal distribution of each token; None for a deterministic
    # drafter, whose proposals are point masses.
    q: list[Distribution] | None = None
    # Tokens the drafter first had to decode to catch up with the context
    # (after plain rounds, many; in steady speculation, one or two), and the
    # seconds that took (0: not measured apart from the drafting). A draft
    # through text reports its round's whole fixed part there: it is priced
    # per round as a catch-up is (text_draft.per_round_seconds).
    n_synced: int = 0
    t_synced_s: float = 0.0
    # The draft's confidence in each token (its distribution's top
    # probability where it drew it; () for a drafter without one, a copy),
    # for the policy to learn how often such tokens land (ConfidenceCut).
    confidence: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft(())


def top_probability(row: np.ndarray) -> float:
    """The likeliest token's probability under the softmax of logits ``row``:
    1 / Σ exp(z - max z), in float32. Once per draft step: 0.04 ms on a
    49k-token row here, where float64 with a copy took 0.2 ms (3 % of a
    SmolLM2 Q4_1 step on 2 cores)."""
    z = np.asarray(row, dtype=np.float32)
    return float(1.0 / np.exp(z - z.max()).sum(dtype=np.float64))


class ConfidenceCut:
    """Where a draft stops early (``Drafter.draft``): at the first token after
    the first for which the chance that it and every token before it land,
    each its draft's confidence (its distribution's top probability) read
    through ``landing``, the share of such tokens that landed
    (``ConfidenceCalibration``), is below ``floor``. Once it has stopped a
    draft it stays stopped. (A draft through text still writes the step it
    stopped at: the lookahead that settles the text before it.)

    The floor weighs what one more token costs by the rate the round is
    expected to make (``RoundPricing.cut_floor``). The token that crossed it
    used to be drafted too, against a floor of its cost alone: played on the
    same recordings, the weaker same-tokenizer draft made 1.045 of its best
    fixed γ with that cut and 1.100 with this one.

    The first token is drafted whatever the draft thinks of it: the policy
    drafts a round on what it learned of first tokens. Counted in, it made a
    replayed policy draft one token a round where the draft is often unsure
    of its first and right (1.27-1.28x on two prompts where the cut without
    it made 2.1-2.4x).

    Where a draft model is unsure, its token seldom lands, and every token
    after it is verified for nothing; but how seldom is the pair's own: a
    draft of the target's own network (SmolLM2 Q4_1 for its F32 ×4) lands
    most tokens it is unsure of, another network's (SmolLM2 for Gemma-3-270M
    ×4, through text) few. Hence ``landing``, learned from every round:
    replayed with it, the cut made the two 1.01x and 1.13x of the same policy
    without a cut; reading the confidence as it is, 0.82x and 1.16x."""

    def __init__(self, floor: float, landing: Callable[[float], float]) -> None:
        self.floor = floor
        self.landing = landing
        self.sure = 1.0  # the chance that the tokens drafted so far all land
        self._first = True
        self._stopped = False

    def goes_on(self, confidence: float) -> bool:
        """Whether the draft drafts the token it is ``confidence`` sure of."""
        if self._first:  # (whatever the floor: above 1 where no token could pay)
            self._first = False
            return True
        if self._stopped:
            return False
        sure = self.sure * self.landing(confidence)
        if sure < self.floor:
            self._stopped = True
            return False
        self.sure = sure
        return True


class Drafter(Protocol):
    name: str  # shown to users: "draft model", "prompt lookup"

    # Its traits (what the session, the registry and the policy ask of it):
    @property
    def through_text(self) -> bool:
        """Whether it drafts through text, in another tokenizer's tokens."""
        ...

    @property
    def copies_text(self) -> bool:
        """Whether it copies text (prompt lookup): earlier chats help it."""
        ...

    @property
    def steps_per_token(self) -> float:
        """Draft-model steps per target token: 1 in the target's vocabulary
        (and for a drafter without a model), the ratio of the two tokenizers'
        token counts through text, measured as it drafts."""
        ...

    @property
    def draft_model(self) -> Drafter | None:
        """Its draft model part (itself, or a combined drafter's model); None
        for a drafter without one (prompt lookup)."""
        ...

    def set_history(self, history: HistoryIndex | None) -> None:
        """Copy from ``history`` too (None: from the conversation only); a
        drafter that does not copy text ignores it."""
        ...

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        cut: ConfidenceCut | None = None,
    ) -> Draft:
        """Propose up to ``n_max`` tokens that follow ``context``.

        ``context`` is every committed token (prompt and reply so far); it only
        grows during a generation, and may change arbitrarily between them.
        A draft model stops early where ``cut`` says (None: it drafts
        ``n_max``); a drafter without a model's confidence (prompt lookup)
        ignores it. The cut depends on the draft's own distributions only, so
        verification stays lossless.
        """
        ...

    def option(self, context: list[int]) -> Option | None:
        """The coming round's option, a cheap signal of how likely its draft is
        to land, before drafting it: rounds of the same option share acceptance
        estimates, so the policy can draft long where the drafter is sure and
        not at all where it guesses. ``None``: the drafter has nothing to
        propose now (the round decodes plainly without asking the policy).
        Drafters without such a signal offer bucket 0."""
        ...

    def prepare(self, context: list[int]) -> None:
        """Catch up on ``context`` now, during prompt processing, so that the
        first round drafts at once (a draft model decodes the prompt here)."""
        ...

    def behind(self, context: list[int]) -> int:
        """How many tokens the drafter decodes before it drafts from
        ``context``: ``prepare``'s reading and the first draft's catch-up (0:
        a drafter without a model, which reads a prompt for free). What
        reading the prompt costs, for the policy to weigh against what
        drafting can save."""
        ...

    def set_abort(self, event: threading.Event | None) -> None:
        """While ``event`` is set, a long decode of the drafter's stops midway
        (DecodeAbortedError); None: never. A drafter without a model ignores it."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class TreeDrafter(Drafter, Protocol):
    """A drafter that can also propose a token tree: its chain plus side nodes."""

    def draft_tree(
        self,
        context: list[int],
        depth: int,
        n_side: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """A main chain of up to ``depth`` tokens (what ``draft`` would propose)
        and up to ``n_side`` side nodes: other candidates where the drafter is
        least sure. Side candidates at one position must come in the order they
        were drawn, each with the distribution it was drawn from."""
        ...


@runtime_checkable
class ChoosingDrafter(Drafter, Protocol):
    """A drafter with several sources (a draft model and prompt lookup): each
    round it offers the policy an option per source it could draft from, and
    drafts from the option the policy chose. An option's ``kind`` says how it
    is priced: ``FREE`` (a copy: no decode now, the draft model reads it
    later), ``READ`` (a copy the draft model reads in one batch and checks
    before it is sent) or ``MODEL`` (draft steps)."""

    # Whether the copies are offered (``options``); False: the draft model's
    # own chain alone, as the regimes bench compares the two on one engine.
    copying: bool

    def options(self, context: list[int]) -> tuple[Option, ...]:
        """An option per source that can propose a draft now (``Drafter.option``),
        the one to prefer when nothing else decides first; () for none."""
        ...

    def use(self, option: Option) -> None:
        """Draft the coming round as ``option`` (one of ``options``') says."""
        ...
