"""The draft model and prompt lookup in one round loop.

Prompt lookup drafts for free and copies long stretches (rewrites, code
edits, quotes); the draft model guesses new text. Each round this drafter
offers the policy both where lookup has a match (``options``), and the policy
picks by the speedup it expects of each (``GammaController.choose``): a
lookup draft costs no draft steps, but the draft model must read what it
supplied before it drafts again, which is priced as that catch-up.

A lookup copy is also offered checked by the draft model
(``DraftModelDrafter.draft_checked``): the model reads the copy in one batch
together with the committed tokens it must catch up on anyway, keeps the
copy while it is the model's own top choice and drafts on from where it
strays, so a copy of boilerplate that the reply has left is cut before the
target spends a verification on it, and the model is in step with the
copied text already. What the check costs is the model's reading of the
batch: on a GPU about one step, on a small CPU about as much as drafting
(measured here: 17 tokens of a Q4_1 SmolLM2 read in ~190 ms, 16 steps
~240 ms),
so the policy chooses between the copy as it is and the copy checked by
what each has paid (``GammaController.choose``).

The draft model otherwise stays in step on its own: every draft of its own
first decodes the committed tokens it has not seen (``DraftModelDrafter``).
"""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np

from gambit.engine.drafters.base import ConfidenceCut, Draft, Option, SourceKind
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.drafters.text_draft import TextDraftDrafter
from gambit.engine.verification.sampling import SamplingParams


class CombinedDrafter:
    """``ChoosingDrafter`` over a draft model (its ``MODEL`` option) and prompt
    lookup (lookup's options, by source and match length, priced ``FREE``; the
    same copies checked by the draft model, priced ``READ``). Where both the
    conversation and the history have a match, both are offered: the policy
    learns each apart."""

    name = "draft model + lookup"
    # Without measurements to choose by (a fixed policy): lookup from a match
    # this long, in lookup's buckets (3: a copied stretch of 4-7 tokens).
    # Measured on the F16 target: after 8 or more, 6.5-7 of 8 drafts landed.
    LOOKUP_FIRST_FROM = 3
    # Traits (``Drafter``): it copies text; its draft model sets the rest.
    copies_text = True

    def __init__(
        self,
        model: DraftModelDrafter | TextDraftDrafter,
        lookup: PromptLookupDrafter,
        check_copies: bool = True,
    ) -> None:
        self.model = model
        self.lookup = lookup
        # Lookup's copies may also be offered checked by the draft model
        # before the target verifies them (DraftModelDrafter.draft_checked,
        # which needs the target's vocabulary); False: only as copied.
        if check_copies and model.through_text:
            raise ValueError("only a draft model of the target's vocabulary checks copies")
        self.check_copies = check_copies
        self.copying = True  # (ChoosingDrafter: False offers the draft model alone)
        self._chosen: Option | None = None  # this round's (None: the draft model's)

    @property
    def draft_model(self) -> DraftModelDrafter | TextDraftDrafter:
        return self.model

    @property
    def through_text(self) -> bool:
        return self.model.through_text

    @property
    def steps_per_token(self) -> float:
        return self.model.steps_per_token

    def options(self, context: list[int]) -> tuple[Option, ...]:
        sources = self.lookup.sources(context) if self.copying else ()
        copies = tuple(replace(o, kind=SourceKind.FREE) for o in sources)
        model = self.model.option(context)
        if model is None:
            return copies
        if not copies:
            return (model,)
        # Checked copies need the model; a fixed policy prefers them (a copy
        # that strays is cut before the target's batch).
        checked = tuple(replace(o, kind=SourceKind.READ) for o in sources)
        checked = checked if self.check_copies else ()
        if sources[0].bucket >= self.LOOKUP_FIRST_FROM:
            return (*checked, *copies, model)
        return (model, *checked, *copies)

    def set_history(self, history: HistoryIndex | None) -> None:
        self.lookup.set_history(history)

    def use(self, option: Option) -> None:
        copies = option.kind is not SourceKind.MODEL
        self._chosen = option if copies else None
        if copies:
            self.lookup.select(option)

    def option(self, context: list[int]) -> Option | None:
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
        cut: ConfidenceCut | None = None,
    ) -> Draft:
        chosen = self._chosen
        if chosen is None:
            return self.model.draft(context, n_max, sampling, rng, cut)
        copy = self.lookup.draft(context, n_max, sampling, rng)
        if chosen.kind is not SourceKind.READ or not copy.tokens:
            return copy
        assert isinstance(self.model, DraftModelDrafter)  # (check_copies)
        return self.model.draft_checked(context, copy.tokens, n_max, sampling, rng)

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
