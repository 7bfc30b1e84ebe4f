"""The drafter protocol: propose up to n tokens that continue a context."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from gambit.engine.verification.sampling import Distribution, SamplingParams
from gambit.engine.verification.tree import DraftTree


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

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft(())


class Drafter(Protocol):
    name: str  # shown to users: "draft model", "prompt lookup"

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        """Propose up to ``n_max`` tokens that follow ``context``.

        ``context`` is every committed token (prompt and reply so far); it only
        grows during a generation, and may change arbitrarily between them.
        """
        ...

    def hint(self, context: list[int]) -> int | None:
        """A cheap signal of how likely the next draft is to land, before
        drafting it: rounds with the same hint share acceptance estimates, so
        the policy can draft long where the drafter is sure and not at all
        where it guesses. ``None``: the drafter has nothing to propose now (the
        round decodes plainly without asking the policy). Drafters without
        such a signal return 0."""
        ...

    def source(self, hint: int) -> str:
        """What drafts a round with ``hint`` (a round's ``drafted_by``): the
        drafter's ``name``, or the part of it that drafts such rounds (prompt
        lookup copying from the user's earlier chats)."""
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
    round it offers the policy one hint per source it could draft from, and
    drafts from the source of the hint the policy chose."""

    def options(self, context: list[int]) -> tuple[int, ...]:
        """A hint per source that can propose a draft now (``Drafter.hint``),
        the source to prefer when nothing else decides first; () for none."""
        ...

    def use(self, hint: int) -> str:
        """Draft the coming round from the source of ``hint``; its name."""
        ...

    def is_free(self, hint: int) -> bool:
        """Whether drafting from ``hint``'s source costs no decode (prompt
        lookup): the policy prices such rounds by what follows them instead."""
        ...

    def is_read(self, hint: int) -> bool:
        """Whether ``hint``'s drafts are read by a draft model in one batch
        before they are sent (a lookup copy it checks): the policy prices
        such rounds at that reading, not at draft steps."""
        ...
