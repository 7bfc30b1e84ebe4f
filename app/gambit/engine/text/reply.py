"""What a reply is asked for and what each of its rounds produced.

The records the engine's callers hold (the window, the server, the command
line, the bench): ``GenerationConfig`` in, ``Round`` out per round, with the
``StopReason`` of the last. The decoder (``gambit.engine.decoder``) makes them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gambit.engine.verification.sampling import SamplingParams


class StopReason(str, enum.Enum):
    EOG = "end of text"
    MAX_TOKENS = "max tokens"
    STOP_STRING = "stop string"
    CANCELLED = "cancelled"
    CONTEXT_FULL = "context full"


@dataclass(frozen=True, slots=True)
class Round:
    """What one round produced. ``tokens[:n_accepted]`` came from the drafter
    (and were accepted); the rest were produced by the target."""

    index: int
    tokens: tuple[int, ...]
    text: str  # the new text this round made visible (may lag tokens by a partial UTF-8 char)
    gamma: int  # draft length asked for
    n_drafted: int
    n_accepted: int
    outcomes: tuple[bool, ...]  # per draft position tried: accepted?
    t_draft_s: float
    t_verify_s: float  # the target's batch decode plus verification
    elapsed_s: float  # since generate() was called, when this round was emitted
    stop: StopReason | None = None
    n_draft_synced: int = 0  # tokens the drafter decoded to catch up, within t_draft_s
    # the seconds of t_draft_s that took (0: not measured; a draft through
    # text: its round's fixed part, Draft.t_synced_s)
    t_draft_synced_s: float = 0.0
    # Token trees: ``n_drafted`` counts every node and ``outcomes`` is per
    # depth (was one of its candidates accepted?); ``n_side`` nodes were side
    # candidates, and ``main_outcomes`` is what the main chain alone showed.
    n_side: int = 0
    main_outcomes: tuple[bool, ...] | None = None
    # Committed tokens re-decoded at the front of this round's batch (an
    # accepted side branch of the round before); the batch held
    # n_catch_up + 1 + n_drafted tokens.
    n_catch_up: int = 0
    # Prompt processing that came before this round, within elapsed_s: the
    # target's before the first round, the drafter's reading of the prompt
    # before the round that follows it (the first token does not wait for it).
    t_prompt_s: float = 0.0
    # The name of what drafted this round (a source of a ChoosingDrafter, or
    # the drafter itself: "prompt lookup"); "" where nothing was drafted.
    drafted_by: str = ""
    # Of the drafts, the first this many were forced by the reply's grammar
    # (point masses: gambit.engine.text.grammar); after them, ``drafted_by``
    # drafted the rest. A round the grammar drafted alone has drafted_by
    # GRAMMAR_SOURCE and n_forced == n_drafted.
    n_forced: int = 0
    # The CPU threads the round decoded on, which follow the load
    # (gambit.engine.machine.threads); 0: not known (a unit test's target).
    threads: int = 0
    # The drafter's confidence in each token of its chain (Draft.confidence;
    # () where it has none), for the policy to learn how such tokens land.
    confidence: tuple[float, ...] = ()

    @property
    def chain_outcomes(self) -> tuple[bool, ...]:
        """Per position of the main chain tried: accepted? (``outcomes`` for a chain)."""
        return self.outcomes if self.main_outcomes is None else self.main_outcomes

    @property
    def side_gain(self) -> int:
        """Draft tokens accepted beyond what the main chain alone would have given."""
        chain = self.chain_outcomes
        n = chain.index(False) if False in chain else len(chain)
        return self.n_accepted - n

    @property
    def from_draft(self) -> tuple[bool, ...]:
        n = len(self.tokens)
        k = min(self.n_accepted, n)
        return (True,) * k + (False,) * (n - k)


# What drafts the tokens a grammar forces (``Round.drafted_by``, the
# statistics' name): point masses the target verifies in its batch, always
# accepted (gambit.engine.text.grammar).
GRAMMAR_SOURCE = "grammar"


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_strings: tuple[str, ...] = ()
    # The grammar the reply follows (gambit.engine.text.grammar; None: free text).
    grammar: str | None = None
