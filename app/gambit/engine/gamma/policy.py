"""The vocabulary of γ policies: what decides each round's draft length.

``GammaPolicy`` is what the decoder asks every round; ``FixedGamma`` always
answers the same; the adaptive one is ``gambit.engine.gamma.controller``'s
``GammaController``, made by ``Engine.new_controller``. The modes, the
default draft lengths and the expected speedup a policy needs before it
drafts are declared here, for the settings, the command line and the
benchmarks to read without reaching into the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gambit.engine.drafters.base import ConfidenceCut, Option
from gambit.engine.text.reply import Round

PolicyMode = Literal["adaptive", "fixed", "off"]

# The defaults of the two draft lengths, declared once: the settings, the
# engine's config, the command line and the benchmarks read them from here.
# Up to 16: on a realistic pair (a draft step ~0.1 of a target step, batches
# of 9 costing ~2.5 steps) the best fixed γ measured was 8-16; the adaptive
# policy goes as far as the measured costs and acceptance say.
DEFAULT_GAMMA = 4  # the fixed policy's
DEFAULT_GAMMA_MAX = 16  # the adaptive policy's ceiling and fixed γ's limit

# The expected speedup over plain decoding the adaptive policy must see
# before it drafts; the reports recommend no gain below it either.
SWITCH_ON_ABOVE = 1.05


@dataclass(frozen=True)
class Decision:
    gamma: int
    expected_speedup: float  # of the chosen γ against plain decoding (1.0 when off)
    best_speedup: float  # of the best γ > 0, whether chosen or not
    reason: str
    side: int = 0  # tree side nodes next to the main chain (0: a chain)
    probing: bool = False  # drafting to measure acceptance again, not because it pays


class GammaPolicy(Protocol):
    """Chooses the draft length of each round; 0 means plain decoding.

    Names say what a call does: ``decide_*`` and ``start_reply`` change what
    the policy has decided, ``observe*`` what it has learned; ``choose``,
    ``decided_side_nodes`` and ``decided_cut`` only ask."""

    def decide_gamma(self, option: Option | None = None) -> int:
        """Decide this round's draft length (and its side nodes). ``option``:
        what the drafter offers for this round (``Drafter.option``; None: as
        the last round); rounds of the same option share what the policy learns."""
        ...

    def choose(self, options: Sequence[Option]) -> Option:
        """Which of a ``ChoosingDrafter``'s options (one per source, the
        preferred first) the coming round drafts from."""
        ...

    def start_reply(self, n_context: int) -> None:
        """A generation starts on ``n_context`` prompt tokens the drafter has not read."""
        ...

    def decide_reading(self, n_read: int = 0, horizon: int = 0) -> bool:
        """Whether the drafter reads the prompt now, so that the next rounds
        can draft: ``n_read`` tokens it would decode, for a reply of at most
        ``horizon`` more tokens (0: unknown)."""
        ...

    def observe_reading(self, n_read: int, seconds: float) -> None:
        """The drafter read the ``n_read`` tokens it was behind in ``seconds``."""
        ...

    def decided_side_nodes(self) -> int:
        """Side nodes for this round's tree (0: a chain); read after ``decide_gamma``."""
        ...

    def decided_cut(self) -> ConfidenceCut | None:
        """Where this round's draft stops early (``Drafter.draft``'s ``cut``;
        None: it drafts all γ); read after ``decide_gamma``."""
        ...

    def observe(self, rnd: Round) -> None:
        """Learn from the round just played (``decide_gamma``'s, or a plain one)."""
        ...

    def at_threads(self, n: int) -> None:
        """Rounds run on ``n`` CPU threads from now on (the load changed): price them so."""
        ...


@dataclass
class FixedGamma:
    gamma: int
    side: int = 0

    def decide_gamma(self, option: Option | None = None) -> int:
        return self.gamma

    def choose(self, options: Sequence[Option]) -> Option:
        return options[0]  # (nothing measured to choose by: the drafter's preference)

    def start_reply(self, n_context: int) -> None:
        pass

    def decide_reading(self, n_read: int = 0, horizon: int = 0) -> bool:
        return self.gamma > 0

    def observe_reading(self, n_read: int, seconds: float) -> None:
        pass

    def decided_side_nodes(self) -> int:
        return self.side

    def decided_cut(self) -> ConfidenceCut | None:
        return None  # (a fixed γ drafts what it says)

    def observe(self, rnd: Round) -> None:
        pass

    def at_threads(self, n: int) -> None:
        pass
