"""When to bet: adaptive γ, an automatic off-switch and probing, from measurements.

Speculation pays when the expected tokens per round outrun what the round
costs. With per-position acceptance α_i (the chance the i-th draft token is
accepted given the ones before it were), a round with γ draft tokens yields

    E[tokens | γ] = 1 + Σ_{i=1..γ} Π_{j=1..i} α_j

and costs γ·t_draft + t_target(γ+1), where t_target(k) is the time to verify
a batch of k tokens *on this machine* (on a CPU it grows with k; on a GPU it
barely does). Plain decoding yields 1 token per t_target(1). The policy picks
the γ in 0..γ_max with the best expected rate; γ = 0 means speculation off.

While off, nothing is learned about acceptance, so the policy probes: a
draft of the length that would pay best if every token landed, as often as
keeps probing under 3 % of the plain decoding time (a failed probe wastes its
draft and the larger batch; a draft model must first re-read what it
skipped). Hysteresis (switch on above +5 %, off below ±0 %) keeps it from
flapping on noise.

Reading is a cost too. A draft model reads each prompt before it can draft,
and on a CPU a small quantized draft may read slower than the target does
(measured: SmolLM2 Q4_1 prompt processing at 297 tokens/s, its F32 target at
580). So a reply decodes plainly, and says why, where even drafts that all
land could not save what reading its prompt costs over the reply's expected
length (learned from earlier replies, capped by max tokens): a long prompt
and a short answer.

Switching off is not free either: a draft model switched off must re-read
what it skipped before it is tried again. So it switches off only where
drafting would not pay even with acceptance one standard error above its
estimate, which after a few rounds is worth little.

Token trees add a second knob, w side nodes next to the main chain of γ.
Their worth is measured the same way: ``side_gain`` is the running mean of
draft tokens accepted thanks to side nodes, per side node sent, so

    E[tokens | γ, w] = E[tokens | γ] + w · side_gain

at a cost of γ·t_draft + t_target(γ + 1 + w). The policy picks the (γ, w)
with the best expected rate; where a batch costs about as much as one token
(GPUs) side nodes are nearly free and trees win, where every extra token in
the batch costs (a small CPU) the measured gain must beat it.

A drafter with two sources (the draft model and prompt lookup) offers both
each round where lookup has a match, and ``choose`` takes the one whose best
round is expected to pay more, each with its own acceptance (by hint) and its
own cost: a lookup draft costs no draft steps, but the draft model must read
the tokens it supplied before it drafts again, so each is priced at that
catch-up (``CostModel.catch_up_cost``). A lookup copy can also be offered
checked by the draft model (read in one batch, cut where the model's top
choice differs): priced at reading γ tokens now, with the acceptance
learned for checked copies apart. It is an option only where the model
reads a token for well under a draft step (a GPU, where a batch costs about
one step); where reading costs about what drafting does (a small quantized
draft on a CPU) the check costs what the model's own chain does.

Everything here is measured (``gambit.engine.estimates``): ``CostModel`` is
calibrated at load (``calibrate``) and updated from every round's timings and
every prompt the drafter reads; ``AcceptanceModel`` from every round's outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gambit.engine import controller_wording as wording
from gambit.engine.estimates import ACCEPT_WEIGHT, AcceptanceModel, CostModel
from gambit.engine.policy import (
    DEFAULT_GAMMA,
    DEFAULT_GAMMA_MAX,
    SWITCH_ON_ABOVE,
    Decision,
    PolicyMode,
)
from gambit.engine.reply import Round, StopReason


@dataclass
class _HintState:
    acceptance: AcceptanceModel
    on: bool = True


class GammaController:
    """Chooses γ for each round, and keeps measuring whatever the mode.

    - ``adaptive``: the γ in 0..γ_max with the best expected tokens per second;
      off when no γ beats plain decoding, with probes to switch back on.
    - ``fixed``: always ``fixed_gamma``.
    - ``off``: never speculate.

    Costs and acceptance are updated from every round in every mode, so the
    baseline and the expected speedup stay current when the user switches.
    """

    ON_ABOVE = SWITCH_ON_ABOVE
    OFF_BELOW = 1.0
    # Probing costs something (a draft model must catch up on skipped text):
    # only probe where the best case, every draft accepted, is clearly a win.
    PROBE_CEILING = 1.2
    PROBE_BASE = 16  # the fewest plain tokens between probes
    PROBE_MAX = 2048  # the most: the text may have changed since
    # While off, probing may cost at most this share of the plain decoding
    # time it interrupts: a probe that fails wastes its draft and the larger
    # verification batch, and a draft model must first catch up on every
    # token it skipped (measured: ~0.2 of a target token each on a CPU, up to
    # 256 of them). So a cheap probe (prompt lookup) comes every few dozen
    # tokens, a costly one waits for the start of a reply, where the draft
    # reads the prompt during prompt processing, or until it is paid for.
    PROBE_BUDGET = 0.03
    # The most a drafter catches up on before it restarts on the recent context
    # (DraftModelDrafter.max_catch_up).
    CATCH_UP_MAX = 256
    # Before any tree round: tokens gained per side node. SpecInfer-style
    # trees report a few tenths; the first rounds measure the real figure.
    SIDE_GAIN_PRIOR = 0.25
    # Before any reply has ended: its expected length, when max tokens does not
    # cap it lower. Then a running mean (REPLY_WEIGHT) of the replies' lengths.
    REPLY_PRIOR = 256
    REPLY_WEIGHT = 0.3
    # A copy checked by the draft model (``ChoosingDrafter.is_read``) is
    # offered to the choice only where the model reads a token for less than
    # this share of a draft step, as measured on its reading of prompts.
    # Where reading costs about what drafting does, the check costs what the
    # model's own chain does, and trying it costs probes: on this CPU (Q4_1
    # SmolLM2, 2 cores) offering it made draft model + lookup 0.94x and 0.95x
    # of the copies alone (F32 ×4, F32). Prompts are read in large batches,
    # cheaper per token than a copy's 17 (measured here: 0.47 of a step on a
    # prompt, ~0.7 on 17 tokens), so the bar sits well below; a GPU reads a
    # batch for about one step (a few hundredths of a step per token).
    READ_CHEAP_BELOW = 0.25

    def __init__(
        self,
        costs: CostModel,
        mode: PolicyMode = "adaptive",
        gamma_max: int = DEFAULT_GAMMA_MAX,
        fixed_gamma: int = DEFAULT_GAMMA,
        prior_alpha: float = 0.6,
        side_max: int = 0,
        fixed_side: int = 0,
        node_max: int | None = None,
        free_hint: Callable[[int], bool] | None = None,
        read_hint: Callable[[int], bool] | None = None,
    ) -> None:
        """``side_max``: most tree side nodes per round (0: chains only);
        ``node_max``: most draft tokens per round, chain and side nodes
        together (default γ_max + side_max); ``free_hint``: which hints
        draft at no cost (``ChoosingDrafter.is_free``; None: none do);
        ``read_hint``: which hints' drafts the draft model reads in one
        batch (``ChoosingDrafter.is_read``; None: none do)."""
        if gamma_max < 1:
            raise ValueError("gamma_max must be 1 or more")
        self.node_max = gamma_max + side_max if node_max is None else max(1, node_max)
        if costs.k_max < min(self.node_max, gamma_max + side_max) + 1:
            raise ValueError("the cost model must cover every verification batch size")
        self.mode: PolicyMode = mode
        self.gamma_max = gamma_max
        self.fixed_gamma = max(0, min(fixed_gamma, gamma_max))
        self.side_max = max(0, side_max)
        self.fixed_side = max(0, min(fixed_side, self.side_max))
        self.side_gain = self.SIDE_GAIN_PRIOR
        self._speedup_cache: dict[tuple[object, ...], np.ndarray] = {}
        self.costs = costs
        self.prior_alpha = prior_alpha
        # What is learned per drafter hint (Drafter.hint): acceptance, and
        # whether speculation is on for rounds with that hint.
        self._hints: dict[int, _HintState] = {}
        self._hint = 0
        self._free_hint = free_hint
        self._read_hint = read_hint
        # The first reply may probe at once: the prior is only a guess.
        self._tokens_since_probe = self.PROBE_MAX
        self._probing = False
        self._behind = 0  # committed tokens the drafter has not read yet
        self.reply_length = 0.0  # running mean of replies' lengths (0: none ended yet)
        self._reply_tokens = 0  # in the current reply
        # Why the current reply decodes plainly: reading its prompt would not
        # pay (decide_reading); None: it drafts as decided round by round.
        self._sit_out: str | None = None
        self._state(0)
        self.decision = self._decide()

    def _state(self, hint: int) -> _HintState:
        state = self._hints.get(hint)
        if state is None:
            state = _HintState(AcceptanceModel(self.gamma_max, self.prior_alpha))
            self._hints[hint] = state
            # Start from what the calibration and the prior predict.
            alpha = state.acceptance.estimate()
            state.on = float(self._speedups(alpha, hint).max()) >= self.OFF_BELOW
        return state

    @property
    def acceptance(self) -> AcceptanceModel:
        """Acceptance as learned for the current hint (the last ``next_gamma``'s)."""
        return self._hints[self._hint].acceptance

    @property
    def on(self) -> bool:
        """Whether speculation is on for rounds with the current hint."""
        return self._hints[self._hint].on

    @on.setter
    def on(self, value: bool) -> None:
        self._hints[self._hint].on = value

    @property
    def baseline_tokens_per_s(self) -> float:
        """Plain decoding's rate on this machine, model and context: 1 / t_target(1)."""
        t1 = self.costs.verify_cost(1)
        return 1.0 / t1 if t1 > 0 else 0.0

    # -- GammaPolicy
    def start_reply(self, n_context: int) -> None:
        """A reply starts on ``n_context`` prompt tokens the drafter has not read."""
        self._behind = n_context
        self._reply_tokens = 0
        self._sit_out = None

    def decide_reading(self, n_read: int = 0, horizon: int = 0) -> bool:
        """Whether the drafter reads the prompt now (``n_read`` tokens) for a
        reply of at most ``horizon`` more tokens (0: unknown). Where it does
        not, the reply decodes plainly (``_sit_out`` says why) unless a probe
        or the drafter's own catch-up brings it back."""
        if self.mode != "adaptive":
            return self.mode == "fixed" and self.fixed_gamma > 0
        on = [state for state in self._hints.values() if state.on]
        if not on:
            return self._probe_due()
        if n_read == 0:
            return True  # reading is free (prompt lookup)
        # Sit the reply out only where even drafts that all land could not
        # repay the reading: the expected speedup is an estimate, and measured
        # here it ran below what fixed γ = 8 made (1.2-1.3x against 1.4-1.5x
        # on F32 + Q4_1), so pricing with it sat out replies that paid.
        ceiling = self.ceiling_speedup()
        tokens = self.expected_reply_length(horizon)
        saving = tokens * self.costs.verify_cost(1) * max(0.0, 1.0 - 1.0 / ceiling)
        reading = self.costs.catch_up_cost(n_read)
        if reading <= saving:
            return True
        self._sit_out = (
            f"off for this reply: reading the prompt ({n_read:,} tokens, ~{reading * 1000:.0f} "
            f"ms) costs more than drafting could save over ~{tokens:.0f} tokens "
            f"(at most ~{saving * 1000:.0f} ms)"
        )
        return False

    def observe_reading(self, n_read: int, seconds: float) -> None:
        """The drafter read the ``n_read`` tokens it was behind in ``seconds``."""
        self._behind = 0
        if n_read > 2 and seconds > 0:
            self.costs.observe_catch_up(n_read, seconds)

    def expected_reply_length(self, horizon: int = 0) -> float:
        """Tokens the coming reply is expected to have: the running mean of
        earlier replies (a prior before any), at most ``horizon`` (0: no cap)."""
        expected = self.reply_length or float(self.REPLY_PRIOR)
        return min(expected, float(horizon)) if horizon > 0 else expected

    @property
    def probe_gamma(self) -> int:
        """A probe drafts what would pay best if every draft landed: a short
        probe says nothing about the longer drafts that may be the win."""
        return int(np.argmax(self._speedups(np.ones(self.gamma_max))[:, 0])) + 1

    def probe_cost(self, catch_up: int = 0) -> float:
        """Seconds a probe costs beyond a plain round if none of its drafts lands,
        after the drafter catches up on ``catch_up`` skipped tokens."""
        g = self.probe_gamma
        c = self.costs
        wasted = c.round_cost(g, g + 1) - c.verify_cost(1)
        return max(0.0, wasted) + c.catch_up_cost(min(catch_up, self.CATCH_UP_MAX))

    def _probe_due(self, catch_up: int = 0) -> bool:
        """Whether a probe now keeps probing within its budget."""
        since = self._tokens_since_probe
        budget = self.PROBE_BUDGET * since * self.costs.verify_cost(1)
        if self.ceiling_speedup() <= self.PROBE_CEILING:
            # Nothing could pay, by the costs as measured; but batch costs
            # measured while nothing drafts are the load-time calibration's,
            # and one noisy calibration must not rule speculation out for
            # good (measured: F32 + draft calibrated at t5/t1 2.07 instead of
            # 1.6, and left at 1.02x where fixed γ=8 made 1.22x). So a probe
            # re-measures them every PROBE_MAX tokens, within the budget.
            return since >= self.PROBE_MAX and self.probe_cost(catch_up) <= budget
        if since >= self.PROBE_MAX:
            return True
        return since >= self.PROBE_BASE and self.probe_cost(catch_up) <= budget

    def next_side_nodes(self) -> int:
        """Side nodes for the round ``next_gamma`` just chose (0 while off or probing)."""
        return self.decision.side if self.decision.gamma else 0

    def next_gamma(self, hint: int = 0) -> int:
        self._hint = hint
        self.decision = self._round_decision(self._state(hint))
        if self.decision.probing:
            self._probing = True  # (observe() judges the probe's outcome)
        return self.decision.gamma

    def _round_decision(self, state: _HintState) -> Decision:
        """This round's decision: the policy's, or a probe, or sitting out."""
        decided = self._decide()
        if self.mode == "adaptive" and self._sit_out is not None:
            return Decision(0, 1.0, decided.best_speedup, self._sit_out)
        # A hint never drafted for is probed (below), on or off: its acceptance
        # is only the prior, and a probe's long draft measures more of it.
        untried = not state.acceptance.seen.any()
        if self.mode != "adaptive" or (self.on and not untried):
            return decided
        ceiling = self.ceiling_speedup()
        cannot_pay = ceiling <= self.PROBE_CEILING
        if (untried and not cannot_pay) or self._probe_due(self._behind):
            probe = self.probe_gamma
            reason = wording.probe_reason(probe, self.ON_ABOVE)
            return Decision(
                probe, decided.expected_speedup, decided.best_speedup, reason, probing=True
            )
        if cannot_pay:
            # Even drafts that are always accepted would not pay on this
            # hardware (verification batches or the drafter cost too much).
            reason = wording.cannot_pay_reason(
                ceiling, self.probe_gamma, self.costs, self.OFF_BELOW, self.PROBE_MAX
            )
            return Decision(0, 1.0, decided.best_speedup, reason)
        return decided  # off (γ 0), as decided

    def observe(self, rnd: Round) -> None:
        if rnd.tokens:
            self.costs.observe_verify(rnd.n_catch_up + rnd.n_drafted + 1, rnd.t_verify_s)
        free = self._is_free()
        # (a free source's round leaves the draft model behind as a plain one does)
        self._behind = 0 if rnd.n_drafted and not free else self._behind + len(rnd.tokens)
        if rnd.n_drafted:
            # Side nodes cost the drafter nothing extra: it decodes its main chain only.
            n_chain = rnd.n_drafted - rnd.n_side
            if self._is_read():
                # A checked copy: a batch and the steps after a stray, priced
                # per token apart (they say nothing of one step's cost).
                self.costs.observe_read(rnd.n_drafted, rnd.t_draft_s)
            elif not free:
                self.costs.observe_drafting(
                    n_chain, rnd.t_draft_s, rnd.n_draft_synced, rnd.t_draft_synced_s
                )
            self.acceptance.observe(rnd.chain_outcomes)
            if rnd.n_side:
                gain = rnd.side_gain / rnd.n_side
                self.side_gain += ACCEPT_WEIGHT * (gain - self.side_gain)
        self._tokens_since_probe += len(rnd.tokens)
        self._reply_tokens += len(rnd.tokens)
        if rnd.stop is not None and rnd.stop is not StopReason.CANCELLED:
            n, mean = self._reply_tokens, self.reply_length
            self.reply_length = mean + self.REPLY_WEIGHT * (n - mean) if mean else float(n)
        best = self._best()[2]
        if self._probing:
            self._probing = False
            self._tokens_since_probe = 0
            self.on = best > self.ON_ABOVE
        elif self.on and best < self.OFF_BELOW and self._unlikely_to_pay():
            self.on = False
            self._tokens_since_probe = 0
        elif not self.on and best > self.ON_ABOVE:
            self.on = True

    def _unlikely_to_pay(self) -> bool:
        """Whether drafting would not pay even if acceptance were one standard
        error better than estimated. Switching off is not free: a draft model
        must re-read what it skipped before it can be tried again, so its
        probes are rare. Simulated at α = 0.95 with F32 + Q4_1 costs (γ = 8
        makes 1.18x), switching off on the estimate alone left a draft model
        off for 98 % of the rounds after two early rejections."""
        optimistic = self._speedups(self.acceptance.optimistic())
        return float(optimistic.max()) < self.OFF_BELOW

    def choose(self, hints: Sequence[int]) -> int:
        """The option (a hint per source, the drafter's preferred first) whose
        round is expected to pay best, by its own acceptance and cost; an
        option never drafted for first (``next_gamma`` probes it: its
        acceptance is only the prior). Outside the adaptive mode, the
        drafter's preference."""
        if not self.reading_is_cheap():
            hints = [h for h in hints if not self._is_read(h)] or hints
        if self.mode != "adaptive" or len(hints) < 2:
            return hints[0]
        chosen, best = hints[0], -np.inf
        for hint in hints:
            state = self._state(hint)
            if not state.acceptance.seen.any():
                return hint
            self._hint = hint
            speedup = self._best()[2] if state.on else self.OFF_BELOW
            if speedup > best:
                chosen, best = hint, speedup
        return chosen

    def _is_free(self, hint: int | None = None) -> bool:
        """Whether the source of ``hint`` (default: the current one) drafts at no cost."""
        return self._free_hint is not None and self._free_hint(self._hint if hint is None else hint)

    def reading_is_cheap(self) -> bool:
        """Whether the draft model reads a token for well under a draft step
        (``READ_CHEAP_BELOW``), as measured: then a copy it checks is an option."""
        c = self.costs
        per_token = c.read_ratio or c.catch_up_ratio
        return 0.0 < per_token < self.READ_CHEAP_BELOW * c.draft_ratio

    def _is_read(self, hint: int | None = None) -> bool:
        """Whether the draft model reads the drafts of ``hint``'s source in
        one batch (default: the current one's): a copy it checks."""
        return self._read_hint is not None and self._read_hint(self._hint if hint is None else hint)

    # -- the model
    def expected_rate(self, gamma: int, side: int = 0) -> float:
        """Expected tokens per second of a round with γ draft tokens and ``side`` side nodes."""
        cost = self.costs.round_cost(gamma, gamma + 1 + side)
        tokens = self.acceptance.expected_tokens(gamma) + (side * self.side_gain if gamma else 0.0)
        return tokens / cost if cost > 0 else 0.0

    def _speedups(self, alpha: np.ndarray, hint: int | None = None) -> np.ndarray:
        """Expected speedup over plain decoding, shape (γ_max, side_max + 1):
        entry [γ - 1, w] for γ draft tokens and w side nodes, given α (-inf
        where γ + w exceeds the node budget), for rounds with ``hint``
        (default: the current one). Read-only: it may be cached.

        Speedups are ratios, so they do not depend on t1, which every plain
        round moves: they are computed in units of t1 and kept until the cost
        curve, the draft's cost, α or the side gain change. A round that is off
        asks for them five times (measured: ~0.3 ms a round uncached, 3 % of a
        Q8_0 SmolLM2 token on 2 cores, which is most of the floor's loss)."""
        free, read = self._is_free(hint), self._is_read(hint)
        key = (self.costs.curve_key(), self.side_gain, alpha.tobytes(), free, read)
        cached = self._speedup_cache.get(key)
        if cached is not None:
            return cached
        g = np.arange(1, self.gamma_max + 1)[:, None]
        w = np.arange(self.side_max + 1)[None, :]
        k = g + w + 1  # verification batch sizes
        verify, draft = self.costs.relative_costs(int(k.max()))
        tokens = (1.0 + np.cumsum(np.cumprod(alpha)))[:, None] + w * self.side_gain
        t1 = self.costs.t1
        catch_up = self.costs.catch_up_cost(1) / t1 if t1 > 0 else 0.0
        if read:
            # The draft model reads the copy in one batch now (with the token
            # or two before it, as its own chain's first decode does), drafts
            # where it strays, and is in step with what the target keeps.
            read_per_token = self.costs.read_cost(1) / t1 if t1 > 0 else 0.0
            costs = verify[k - 1] + g * read_per_token
        elif free:
            # No draft steps; the draft model reads every committed token later.
            costs = verify[k - 1] + tokens * catch_up
        else:
            # CostModel.round_cost, in units of t1, for every (γ, w) at once.
            costs = g * draft + self.costs.draft_extra_ratio + verify[k - 1]
        speedups: np.ndarray = tokens / costs * verify[0] if verify[0] > 0 else 0.0 * costs
        speedups[g + w > self.node_max] = -np.inf
        speedups.flags.writeable = False  # shared by every caller until the key changes
        if len(self._speedup_cache) >= 8:
            self._speedup_cache.clear()
        self._speedup_cache[key] = speedups
        return speedups

    def ceiling_speedup(self) -> float:
        """The best expected speedup if every draft token were accepted."""
        return float(self._speedups(np.ones(self.gamma_max))[:, 0].max())

    def expected_speedup(self, gamma: int, side: int = 0) -> float:
        plain = self.expected_rate(0)
        return self.expected_rate(gamma, side) / plain if plain > 0 else 0.0

    def _best(self) -> tuple[int, int, float]:
        """The best (γ, side nodes) and its expected speedup."""
        speedups = self._speedups(self.acceptance.estimate())
        g, w = np.unravel_index(int(np.argmax(speedups)), speedups.shape)
        return int(g) + 1, int(w), float(speedups[g, w])

    def _decide(self) -> Decision:
        """The policy's decision from what it knows now (no probing)."""
        gamma, side, best = self._best()
        if self.mode == "off":
            return Decision(0, 1.0, best, "off: switched off in Settings (policy: off)")
        if self.mode == "fixed":
            g, w = self.fixed_gamma, self.fixed_side if self.fixed_gamma else 0
            s = self.expected_speedup(g, w)
            return Decision(g, s, best, wording.fixed_reason(g, w, s, self.OFF_BELOW), side=w)
        if self.on:
            reason = wording.on_reason(gamma, side, best, self.OFF_BELOW)
            return Decision(gamma, best, best, reason, side=side)
        return Decision(0, 1.0, best, wording.off_reason(best, self.ON_ABOVE, self.OFF_BELOW))
