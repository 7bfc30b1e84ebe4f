"""Prompt lookup: draft by copying what followed the latest match of the last n-gram.

Free (no model) and strong whenever the reply repeats its input: summaries,
rewrites, code edits. The index is incremental: each committed token adds one
n-gram per order, so drafting never rescans the context.
"""

from __future__ import annotations

import numpy as np

from gambit.engine.drafters.base import EMPTY_DRAFT, Draft
from gambit.engine.sampling import SamplingParams


class PromptLookupDrafter:
    name = "prompt lookup"

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError("need 1 <= ngram_min <= ngram_max")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._tokens: list[int] = []
        # order n -> {n-gram: end index of its latest occurrence that has a follower}
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(ngram_min, ngram_max + 1)
        }

    def _extend(self, context: list[int]) -> None:
        seen = len(self._tokens)
        if len(context) < seen or context[:seen] != self._tokens:
            # A different conversation (or an edited one): rebuild.
            self._tokens = []
            for table in self._index.values():
                table.clear()
            seen = 0
        tokens = self._tokens
        for tok in context[seen:]:
            end = len(tokens)  # the n-grams ending here now have a follower: tok
            for n, table in self._index.items():
                if end >= n:
                    table[tuple(tokens[end - n : end])] = end
            tokens.append(tok)

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        self._extend(context)
        if n_max <= 0:
            return EMPTY_DRAFT
        tokens = self._tokens
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(tokens) < n:
                continue
            end = self._index[n].get(tuple(tokens[-n:]))
            if end is not None:
                return Draft(tuple(tokens[end : end + n_max]))
        return EMPTY_DRAFT

    def close(self) -> None:
        pass
