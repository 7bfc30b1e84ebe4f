"""The draft model and prompt lookup in one round loop.

Prompt lookup drafts for free and copies long stretches (rewrites, code
edits, quotes); the draft model guesses new text. Each round this drafter
offers the policy both where lookup has a match (``options``), and the policy
picks by the speedup it expects of each (``GammaController.choose``): a
lookup draft costs no draft steps, but the draft model must read what it
supplied before it drafts again, which is priced as that catch-up.

The draft model stays in step on its own: every draft of its own first
decodes the committed tokens it has not seen (``DraftModelDrafter``), after
lookup rounds as after plain ones.
"""

from __future__ import annotations

import threading

import numpy as np

from gambit.engine.drafters.base import Draft
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.sampling import SamplingParams


class CombinedDrafter:
    """``ChoosingDrafter`` over a draft model (hint 0) and prompt lookup
    (hints ``LOOKUP_HINTS`` + its hint: 1-4 by match length in the context,
    5-7 copied from the history). Where both the conversation and the
    history have a match, both are offered: the policy learns each apart."""

    name = "draft model + lookup"
    LOOKUP_HINTS = 100
    # Without measurements to choose by (a fixed policy): lookup from a match
    # this long, in lookup's buckets (3: a copied stretch of 4-7 tokens).
    # Measured on the F16 target: after 8 or more, 6.5-7 of 8 drafts landed.
    LOOKUP_FIRST_FROM = 3

    def __init__(self, model: DraftModelDrafter, lookup: PromptLookupDrafter) -> None:
        self.model = model
        self.lookup = lookup
        self._source: DraftModelDrafter | PromptLookupDrafter = model

    def options(self, context: list[int]) -> tuple[int, ...]:
        lookups = tuple(self.LOOKUP_HINTS + h for h in self.lookup.sources(context))
        model = self.model.hint(context)
        if not lookups:
            return () if model is None else (model,)
        if model is None:
            return lookups
        if lookups[0] - self.LOOKUP_HINTS >= self.LOOKUP_FIRST_FROM:
            return (*lookups, model)
        return (model, *lookups)

    def set_history(self, history: HistoryIndex | None) -> None:
        self.lookup.set_history(history)

    def use(self, hint: int) -> str:
        self._source = self.lookup if self.is_free(hint) else self.model
        if self.is_free(hint):
            self.lookup.select(hint - self.LOOKUP_HINTS)
        return self.source(hint)

    def source(self, hint: int) -> str:
        if self.is_free(hint):
            return self.lookup.source(hint - self.LOOKUP_HINTS)
        return self.model.name

    def is_free(self, hint: int) -> bool:
        return hint >= self.LOOKUP_HINTS

    def hint(self, context: list[int]) -> int | None:
        """The preferred option (for a caller that does not choose)."""
        options = self.options(context)
        if not options:
            return None
        self.use(options[0])
        return options[0]

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        return self._source.draft(context, n_max, sampling, rng)

    def prepare(self, context: list[int]) -> None:
        self.lookup.prepare(context)
        self.model.prepare(context)

    def behind(self, context: list[int]) -> int:
        return self.model.behind(context)

    def set_abort(self, event: threading.Event | None) -> None:
        self.model.set_abort(event)

    def close(self) -> None:
        self.model.close()
        self.lookup.close()
