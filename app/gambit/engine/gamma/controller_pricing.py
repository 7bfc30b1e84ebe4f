"""What a round is expected to pay, from what has been learned (asks only).

A round with γ draft tokens and w tree side nodes yields, with per-position
acceptance α_i and ``side_gain`` tokens per side node,

    E[tokens | γ, w] = 1 + Σ_{i=1..γ} Π_{j=1..i} α_j + w · side_gain

and costs what its source's drafts cost (``SourceKind``) plus verifying a
batch of γ + 1 + w tokens, t_target(γ + 1 + w), on this machine. Plain
decoding yields 1 token per t_target(1). Everything here reads
``RoundLearning`` and changes nothing it prices with; the policy
(``gambit.engine.gamma.controller``) decides from these prices.
"""

from __future__ import annotations

import math

import numpy as np

from gambit.engine.drafters.base import SourceKind
from gambit.engine.estimates import AcceptanceModel
from gambit.engine.gamma.controller_learning import RoundLearning


class RoundPricing:
    """Expected speedups over plain decoding of every round shape a policy
    may choose, for each kind of draft source."""

    # A copy checked by the draft model (``SourceKind.READ``) is offered to
    # the choice only where the model reads a token for less than this share
    # of a draft step, as measured on its reading of prompts. Where reading
    # costs about what drafting does, the check costs what the model's own
    # chain does, and trying it costs probes: on this CPU (Q4_1 SmolLM2, 2
    # cores) offering it made draft model + lookup 0.94x and 0.95x of the
    # copies alone (F32 ×4, F32). Prompts are read in large batches, cheaper
    # per token than a copy's 17 (measured here: 0.47 of a step on a prompt,
    # ~0.7 on 17 tokens), so the bar sits well below; a GPU reads a batch for
    # about one step (a few hundredths of a step per token).
    READ_CHEAP_BELOW = 0.25
    # The most a drafter catches up on before it restarts on the recent context
    # (DraftModelDrafter.max_catch_up).
    CATCH_UP_MAX = 256

    def __init__(
        self, learned: RoundLearning, gamma_max: int, side_max: int, node_max: int
    ) -> None:
        self.learned = learned
        self.gamma_max = gamma_max
        self.side_max = side_max
        self.node_max = node_max
        self._cache: dict[tuple[object, ...], np.ndarray] = {}

    @property
    def baseline_tokens_per_s(self) -> float:
        """Plain decoding's rate on this machine, model and context: 1 / t_target(1)."""
        t1 = self.learned.costs.verify_cost(1)
        return 1.0 / t1 if t1 > 0 else 0.0

    def speedups(self, alpha: np.ndarray, kind: SourceKind) -> np.ndarray:
        """Expected speedup over plain decoding, shape (γ_max, side_max + 1):
        entry [γ - 1, w] for γ draft tokens and w side nodes, given α (-inf
        where γ + w exceeds the node budget), for rounds drafted by a source
        of ``kind``. Read-only: shared until what it depends on changes.

        Speedups are ratios, so they do not depend on t1, which every plain
        round moves: they are computed in units of t1 and kept until the cost
        curve, the draft's cost, α or the side gain change. A round that is off
        asks for them five times (measured: ~0.3 ms a round uncached, 3 % of a
        Q8_0 SmolLM2 token on 2 cores, which is most of the floor's loss)."""
        costs, side_gain = self.learned.costs, self.learned.side_gain
        key = (costs.curve_key(), side_gain, alpha.tobytes(), kind)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        g = np.arange(1, self.gamma_max + 1)[:, None]
        w = np.arange(self.side_max + 1)[None, :]
        k = g + w + 1  # verification batch sizes
        verify, draft = costs.relative_costs(int(k.max()))
        tokens = (1.0 + np.cumsum(np.cumprod(alpha)))[:, None] + w * side_gain
        t1 = costs.t1
        if kind is SourceKind.READ:
            # The draft model reads the copy in one batch now (with the token
            # or two before it, as its own chain's first decode does), drafts
            # where it strays, and is in step with what the target keeps.
            read_per_token = costs.read_cost(1) / t1 if t1 > 0 else 0.0
            round_costs = verify[k - 1] + g * read_per_token
        elif kind is SourceKind.FREE:
            # No draft steps; the draft model reads every committed token later.
            catch_up = costs.catch_up_cost(1) / t1 if t1 > 0 else 0.0
            round_costs = verify[k - 1] + tokens * catch_up
        else:
            # CostModel.round_cost, in units of t1, for every (γ, w) at once.
            round_costs = g * draft + costs.draft_extra_ratio + verify[k - 1]
        speedups: np.ndarray = (
            tokens / round_costs * verify[0] if verify[0] > 0 else 0.0 * round_costs
        )
        speedups[g + w > self.node_max] = -np.inf
        speedups.flags.writeable = False  # shared by every caller until the key changes
        if len(self._cache) >= 8:
            self._cache.clear()
        self._cache[key] = speedups
        return speedups

    def best(self, acceptance: AcceptanceModel, kind: SourceKind) -> tuple[int, int, float]:
        """The best (γ, side nodes) by ``acceptance``'s estimate, and its expected speedup."""
        speedups = self.speedups(acceptance.estimate(), kind)
        g, w = np.unravel_index(int(np.argmax(speedups)), speedups.shape)
        return int(g) + 1, int(w), float(speedups[g, w])

    def explore(
        self, acceptance: AcceptanceModel, kind: SourceKind, z: float
    ) -> tuple[int, int, float]:
        """The (γ, side nodes) that pay best with acceptance ``z`` standard
        errors above its estimate (``AcceptanceModel.optimistic``), and what
        they are expected to pay by the estimate itself."""
        speedups = self.speedups(acceptance.optimistic(z), kind)
        g, w = np.unravel_index(int(np.argmax(speedups)), speedups.shape)
        expected = self.speedups(acceptance.estimate(), kind)[g, w]
        return int(g) + 1, int(w), float(expected)

    def optimistic_best(self, acceptance: AcceptanceModel, kind: SourceKind, z: float) -> float:
        """The best expected speedup with acceptance ``z`` standard errors
        above its estimate (``AcceptanceModel.optimistic``)."""
        return float(self.speedups(acceptance.optimistic(z), kind).max())

    def ceiling(self, kind: SourceKind) -> float:
        """The best expected speedup of a chain if every draft token were accepted."""
        return float(self.speedups(np.ones(self.gamma_max), kind)[:, 0].max())

    def probe_gamma(self, kind: SourceKind, optimistic: np.ndarray | None = None) -> int:
        """A probe drafts what would pay best with acceptance as ``optimistic``
        as the evidence allows (``AcceptanceModel.optimistic``; None: every
        draft landing). Not the best case regardless: a first probe of 16 whose
        first token missed (Gemma ×4 drafted through text) wasted 16 draft
        steps and a 17-token batch, where what was known paid best at 4-6."""
        alpha = np.ones(self.gamma_max) if optimistic is None else optimistic
        return int(np.argmax(self.speedups(alpha, kind)[:, 0])) + 1

    def probe_cost(
        self, kind: SourceKind, catch_up: int = 0, optimistic: np.ndarray | None = None
    ) -> float:
        """Seconds a probe (``probe_gamma``) costs beyond a plain round if none
        of its drafts lands, after the drafter catches up on ``catch_up``
        skipped tokens."""
        g = self.probe_gamma(kind, optimistic)
        c = self.learned.costs
        wasted = c.round_cost(g, g + 1) - c.verify_cost(1)
        return max(0.0, wasted) + c.catch_up_cost(min(catch_up, self.CATCH_UP_MAX))

    def expected_rate(self, acceptance: AcceptanceModel, gamma: int, side: int = 0) -> float:
        """Expected tokens per second of a round with γ draft tokens and ``side``
        side nodes (priced as the draft model's chain)."""
        cost = self.learned.costs.round_cost(gamma, gamma + 1 + side)
        gained = side * self.learned.side_gain if gamma else 0.0
        tokens = acceptance.expected_tokens(gamma) + gained
        return tokens / cost if cost > 0 else 0.0

    def expected_speedup(self, acceptance: AcceptanceModel, gamma: int, side: int = 0) -> float:
        """``expected_rate`` against plain decoding's."""
        plain = self.expected_rate(acceptance, 0)
        return self.expected_rate(acceptance, gamma, side) / plain if plain > 0 else 0.0

    def token_cost(self, gamma: int) -> float:
        """What one draft token of a draft model's chain of ``gamma`` costs, in
        plain steps (t1): its draft step and its share of the larger batch
        (the batch's cost over one token, spread over the chain). A token is
        worth drafting where the chance it lands is above this: it saves a
        step where it does."""
        costs = self.learned.costs
        t1 = costs.verify_cost(1)
        if gamma < 1 or t1 <= 0:
            return 0.0
        batch = (costs.verify_cost(gamma + 1) - t1) / gamma
        return costs.draft_ratio + max(0.0, batch) / t1

    def cut_floor(self, gamma: int, expected_speedup: float) -> float:
        """Below what chance of landing with every token before it a token of
        a chain of ``gamma`` is not drafted (``ConfidenceCut``): its cost
        (``token_cost``) times the square root of the round's expected
        speedup (1 for a round not expected to pay: a probe).

        A token adds its chance of landing to a round's tokens and its cost
        to the round's time, so it raises the round's rate only where that
        chance beats its cost at the rate the round makes without it: the
        expected speedup, where chances are exact. They are estimates, and
        with the full rate the cost-scaled pair's long chains were cut too
        early (played on its recording: 0.989 of fixed γ = 16 over the suite,
        0.89 on one prompt); at plain decoding's rate (the floor before)
        chains ran long where drafts land less. Played on five pairs'
        recordings in every order, the square root gave each pair its best
        suite, or within 1 % of it, of the exponents 0, 0.5, 0.75 and 1:
        the weaker same-tokenizer draft 1.045 → 1.100 of its best fixed γ,
        the Gemma pair through text 1.112 → 1.168, the others unchanged."""
        return self.token_cost(gamma) * math.sqrt(max(1.0, expected_speedup))

    def reading_is_cheap(self) -> bool:
        """Whether the draft model reads a token for well under a draft step
        (``READ_CHEAP_BELOW``), as measured: then a copy it checks is an option."""
        c = self.learned.costs
        per_token = c.read_ratio or c.catch_up_ratio  # (the prompts' rate until a check has run)
        return 0.0 < per_token < self.READ_CHEAP_BELOW * c.draft_ratio
