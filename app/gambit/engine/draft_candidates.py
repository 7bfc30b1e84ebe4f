"""Draft models besides the loaded one, next to the loaded target: which draft
of the library pays on the user's own chats (Measure on my chats).

Each candidate is loaded once (the fastest kernels that work, as any draft)
and drafts as the registry builds it for its file: token for token where it
shares the target's vocabulary, through text where it does not. They stay
loaded until ``close`` (a measurement replays every candidate on every turn,
by turns), and never touch the engine's own drafter or controller.
"""

from __future__ import annotations

import os
from pathlib import Path

from gambit.engine.drafters.base import Drafter
from gambit.engine.drafters.registry import BuildInput, spec
from gambit.engine.machine.kernels import KernelProbe
from gambit.engine.machine.model_loading import load_draft_runtime
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions


class DraftCandidates:
    def __init__(
        self,
        target: ModelRuntime,
        options: RuntimeOptions,
        probe: KernelProbe,
        k_max: int,
        lookup_ngram_max: int,
    ) -> None:
        self.target = target
        self.options = options
        self.probe = probe
        self.k_max = k_max
        self.lookup_ngram_max = lookup_ngram_max
        self._loaded: dict[str, tuple[ModelRuntime, Drafter]] = {}

    def _load(self, path: Path) -> tuple[ModelRuntime, Drafter]:
        key = os.path.realpath(path)
        found = self._loaded.get(key)
        if found is None:
            runtime, _ = load_draft_runtime(path, self.options, self.probe, self.k_max)
            try:
                given = BuildInput(self.target, runtime, path, self.lookup_ngram_max)
                drafter = spec("draft").build(given).drafter
            except BaseException:
                runtime.close()
                raise
            assert drafter is not None
            found = self._loaded[key] = (runtime, drafter)
        return found

    def runtime(self, path: Path) -> ModelRuntime:
        """``path`` loaded as a draft (once)."""
        return self._load(path)[0]

    def drafter(self, path: Path) -> Drafter:
        """The drafter of ``path`` for this target (its own, not the engine's)."""
        return self._load(path)[1]

    def close(self) -> None:
        for runtime, _ in self._loaded.values():
            runtime.close()
        self._loaded.clear()
