"""What the γ controller estimates from measurements: costs and acceptance.

``CostModel`` holds t_target(k), the time to verify a batch of k tokens on
this machine, and the cost of one draft step, as t1 = t_target(1) times
ratios; it is calibrated at load (``gambit.engine.gamma.calibration``) and updated
from every round's timings. ``AcceptanceModel`` holds per-position acceptance
α_i, updated from every round's outcomes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gambit.engine.cost_curve import fresh_line, non_decreasing

# Exponential weights of the running estimates: ~1/w recent observations count.
COST_WEIGHT = 0.1
ACCEPT_WEIGHT = 0.15
# The acceptance prior's weight in the pooled estimate, in outcomes: enough that
# one outcome is one outcome, not a verdict. At 0.25 a first round that missed
# its first token (one Bernoulli trial) read as α ≈ 0.1 everywhere; drafting
# through text, Gemma ×4 with SmolLM2 then switched off for a whole reply where
# fixed γ = 8 made 2.37x (issue 47). At 3, one miss reads 0.36 at position 1
# and 0.45 beyond, a run of five reads under 0.1, and sixteen drafts that all
# landed read 0.96.
PRIOR_WEIGHT = 3.0
# What the pooled acceptance of all positions weighs in each position's estimate,
# in outcomes (AcceptanceModel.estimate).
POOL_WEIGHT = 4.0
# Verification rounds after which a batch size not measured again is stale:
# the fit of the t(k) curve passes over it where fresher sizes surround it
# (CostModel._smoothed_curve). ~2 replies of 128 tokens at 3-4 tokens a round.
STALE_AFTER = 64
# The share of t1 a plain step re-timed after a reply moves (CostModel.
# observe_plain_step): ~3 replies of memory.
RETIME_WEIGHT = 0.3
# The longest catch-up a round's first draft step stands for: one token after
# a rejection, two after a fully accepted round. Longer ones (after plain
# rounds) are priced per token apart (CostModel.observe_drafting).
SHORT_CATCH_UP = 2
# How the draft's confidence in a token (its top probability) is read as the
# chance it lands (ConfidenceCalibration): buckets by these upper edges, each a
# running share of its tokens that landed, from a prior of LANDING_PRIOR as
# LANDING_PRIOR_WEIGHT tokens, each token's weight fading by LANDING_MEMORY as
# later ones come (~50 tokens of memory a bucket). A prior of 0.9 leaves a
# draft of the target's own network uncut until its rounds show how its
# unsure tokens land; at 0.6, replayed, its first reply lost a quarter.
CONFIDENCE_EDGES = np.array([0.2, 0.4, 0.6, 0.8, 0.95])
LANDING_PRIOR = 0.9
LANDING_PRIOR_WEIGHT = 3.0
LANDING_MEMORY = 0.98
# What the next session of a pair starts from (AcceptanceModel.kept,
# ConfidenceCalibration.kept): each position's acceptance weighs at most
# KEPT_OUTCOMES outcomes, each confidence bucket at most KEPT_TOKENS tokens, so
# that the pair's own figure replaces the generic prior while a few rounds of
# the new session's text still move it (the running mean's memory is ~12).
KEPT_OUTCOMES = 4
KEPT_TOKENS = 12.0
# CostModel's figures besides the t(k) curve that a stored calibration keeps.
_STORED_RATIOS = ("draft_ratio", "draft_extra_ratio", "catch_up_ratio", "read_ratio")


def _running(mean: float, value: float, weight: float = COST_WEIGHT) -> float:
    """A running mean of costs (``weight``); the first value alone."""
    return mean + weight * (value - mean) if mean else value


class CostModel:
    """Running estimates of t_target(k), k = 1..k_max, and of one draft step.

    Costs are kept as t1 = t_target(1) times a relative curve r(k) = t(k)/t1
    (and the draft step as a ratio to t1 too). Plain rounds keep t1 current
    as the context grows; speculative rounds refine r(k). Because the curve
    is relative, a cost measured at one context length stays right at
    another: while speculation is off, only t1 is observed, and every other
    estimate moves with it instead of going stale.

    Decisions read the curve smoothed (``verify_cost``): made non-decreasing
    in k, each size weighted by the rounds that measured it. Single rounds
    are noisy (a 17-token batch of the 1.8 GB cost-scaled target took
    280-460 ms in one reply), and the point estimates of rarely used sizes
    rest on one or two of them: the policy then chased whichever size
    happened to look cheap (γ = 7 after k = 9 read 2.45 t1 and k = 8 1.96,
    where fixed γ = 12 and 16 ran ~8 % faster).
    """

    def __init__(self, k_max: int) -> None:
        self.k_max = k_max
        self.t1 = 0.0
        self.ratio = np.zeros(k_max + 1)  # index k: t_target(k) / t1
        self._seen = np.zeros(k_max + 1, dtype=bool)
        self._n_seen = np.zeros(k_max + 1, dtype=np.int64)  # rounds that measured t(k)
        self._rounds = 0  # verification rounds observed (a clock for staleness)
        self._last_seen = np.zeros(k_max + 1, dtype=np.int64)  # index k: ``_rounds`` then
        self._kept = np.zeros(k_max + 1, dtype=bool)  # index k: as a session before kept it
        self.draft_ratio = 0.0  # one draft step / t1 (0 for prompt lookup)
        self._draft_seen = 0  # rounds that measured it (the calibration counts as one)
        # What a round's catch-up costs beyond the draft step it stands for
        # (it yields the first draft's logits): after a fully accepted round a
        # draft model reads two tokens, the last draft and the bonus token, in
        # a batch of ~1.6 steps. Per round / t1; 0 where never timed apart.
        self.draft_extra_ratio = 0.0
        # One token a drafter catches up on, decoded in a batch / t1 (0: not
        # measured yet; half a draft step is assumed then).
        self.catch_up_ratio = 0.0
        # A copy the draft model checks, per token sent / t1: its reading in
        # one batch and the steps it drafts where the copy strays (0: not
        # measured yet; reading alone, the catch-up's rate, is assumed then).
        self.read_ratio = 0.0
        self._smoothed: tuple[bytes, np.ndarray] | None = None  # (its key, the curve)

    @property
    def t_draft(self) -> float:
        """Seconds per drafted token."""
        return self.draft_ratio * self.t1

    @t_draft.setter
    def t_draft(self, seconds: float) -> None:
        self.draft_ratio = seconds / self.t1 if self.t1 > 0 else 0.0

    @property
    def t_target(self) -> np.ndarray:
        """t_target(k) for k = 0..k_max (0 where never measured), for display."""
        return np.where(self._seen, self.ratio * self.t1, 0.0)

    def copy(self) -> CostModel:
        other = CostModel(self.k_max)
        other.t1 = self.t1
        other.ratio[:] = self.ratio
        other._seen[:] = self._seen
        other._n_seen[:] = self._n_seen
        other._rounds = self._rounds
        other._last_seen[:] = self._last_seen
        other._kept[:] = self._kept
        other.draft_ratio = self.draft_ratio
        other._draft_seen = self._draft_seen
        other.catch_up_ratio = self.catch_up_ratio
        other.read_ratio = self.read_ratio
        other.draft_extra_ratio = self.draft_extra_ratio
        return other

    def to_json(self) -> dict[str, Any]:
        """What was measured, to start the next load from (``CostStore``)."""
        return {
            "k_max": self.k_max,
            "t1": self.t1,
            "ratio": {str(k): float(self.ratio[k]) for k in np.flatnonzero(self._seen)},
            **{key: getattr(self, key) for key in _STORED_RATIOS},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], k_max: int) -> CostModel | None:
        """The costs ``to_json`` kept, for a model of ``k_max`` batch sizes;
        None where they do not cover them or are not sound numbers."""
        try:
            t1 = float(d["t1"])
            ratio = {int(k): float(v) for k, v in dict(d["ratio"]).items()}
            extra = [float(d.get(key, 0.0)) for key in _STORED_RATIOS]
        except (KeyError, TypeError, ValueError):
            return None
        values = [t1, *ratio.values(), *extra]
        if not ratio or max(ratio) < k_max or not all(math.isfinite(v) and v >= 0 for v in values):
            return None
        if t1 <= 0:
            return None
        costs = cls(k_max)
        costs.set_target(1, t1)
        for k, r in sorted(ratio.items()):
            if 1 < k <= k_max and r > 0:
                costs.set_target(k, r * t1)
        costs.draft_ratio, costs.draft_extra_ratio, costs.catch_up_ratio, costs.read_ratio = extra
        costs._draft_seen = 1  # the stored figure weighs as one calibration
        costs._kept[2:] = costs._seen[2:]
        return costs

    def set_target(self, k: int, seconds: float) -> None:
        """Set t_target(k) outright (calibration: k = 1 first)."""
        if not 1 <= k <= self.k_max or seconds <= 0:
            return
        if k == 1:
            self.t1 = seconds
            self.ratio[1] = 1.0
        elif self.t1 > 0:
            self.ratio[k] = seconds / self.t1
        else:
            return
        self._seen[k] = True

    def observe_plain_step(self, seconds: float) -> None:
        """A plain step re-timed on a reply's context (``Engine.finish_reply``,
        the median of a few) took ``seconds``: t1 moves RETIME_WEIGHT of the way.

        Every ratio is measured against the t1 of its time, so a t1 set outright
        from each re-timing put that timing's noise into every ratio measured
        until the next one (re-timed medians read 57-73 ms for one 68 ms step
        on the F32 ×4 target), and sizes measured under different t1 drifted
        apart: the policy then drafted γ = 3 where 4 paid. In a replay of
        recorded replies with costs timed that noisily, a running mean kept
        adaptive at 0.987 of the best fixed γ against 0.982 (weaker draft) and
        0.9996 against 0.998 (its own Q4_1 draft); context growth is followed
        within a few replies."""
        if seconds <= 0:
            return
        self.set_target(1, _running(max(self.t1, 0.0), seconds, RETIME_WEIGHT))

    def observe_verify(self, k: int, seconds: float) -> None:
        """A round's verification batch of ``k`` tokens took ``seconds``. The
        first rounds of each size weigh more than later ones (1/2, 1/3, ...):
        the calibration measured the batch alone, at a short context."""
        if not 1 <= k <= self.k_max or seconds <= 0:
            return
        fresh = self._seen[k] and not self._stale()[k]
        if k > 1 and not fresh and self.t1 > 0 and self._seen[2:].any():
            # A size never measured, or stale: its first round is averaged
            # with the curve's interpolated value, which counts as one round.
            self.ratio[k] = self.verify_cost(k) / self.t1
            self._seen[k] = True
            self._n_seen[k] = 0
        self._rounds += 1
        self._last_seen[k] = self._rounds
        self._kept[k] = False
        if not self._seen[k] or (k > 1 and self.t1 <= 0):
            self.set_target(k, seconds)
            return
        self._n_seen[k] += 1
        weight = max(COST_WEIGHT, 1.0 / (self._n_seen[k] + 1))
        if k == 1:
            self.t1 += weight * (seconds - self.t1)
        else:
            self.ratio[k] += weight * (seconds / self.t1 - self.ratio[k])

    def observe_draft(self, n_tokens: int, seconds: float) -> None:
        """``n_tokens`` draft steps in ``seconds``: a round's drafting after its
        catch-up, where the drafter timed that apart (else with it).

        The first rounds weigh more (1/2, 1/3, ... down to COST_WEIGHT): the
        calibration times a step alone at a short filler context, rounds time
        it where the reply is, taking turns with the target.
        """
        if n_tokens <= 0 or seconds < 0 or self.t1 <= 0:
            return
        ratio = seconds / n_tokens / self.t1
        self._draft_seen += 1
        if self.draft_ratio:
            weight = max(COST_WEIGHT, 1.0 / (self._draft_seen + 1))
            self.draft_ratio += weight * (ratio - self.draft_ratio)
        else:
            self.draft_ratio = ratio

    def observe_catch_up(self, n_tokens: int, seconds: float) -> None:
        """A drafter decoded ``n_tokens`` it had skipped, in ``seconds``."""
        if n_tokens <= 0 or seconds <= 0 or self.t1 <= 0:
            return
        self.catch_up_ratio = _running(self.catch_up_ratio, seconds / n_tokens / self.t1)

    def observe_read(self, n_tokens: int, seconds: float) -> None:
        """A checked copy of ``n_tokens`` took ``seconds`` to draft."""
        if n_tokens <= 0 or seconds <= 0 or self.t1 <= 0:
            return
        self.read_ratio = _running(self.read_ratio, seconds / n_tokens / self.t1)

    def read_cost(self, n_tokens: int) -> float:
        """Seconds to draft a checked copy of ``n_tokens``: as measured, else
        the catch-up's rate (a prompt's reading, in large batches: a floor)."""
        ratio = self.read_ratio or self.catch_up_ratio or self.draft_ratio / 2
        return n_tokens * ratio * self.t1

    def observe_draft_extra(self, seconds: float) -> None:
        """A round's short catch-up took ``seconds`` beyond one draft step."""
        if self.t1 <= 0:
            return
        self.draft_extra_ratio += COST_WEIGHT * (seconds / self.t1 - self.draft_extra_ratio)

    def observe_drafting(
        self, n_chain: int, t_draft_s: float, n_synced: int, t_synced_s: float
    ) -> None:
        """The draft step's cost, and a long catch-up's, from one round that
        drafted ``n_chain`` tokens in ``t_draft_s``, of which ``t_synced_s``
        (0: not timed apart) went to decoding the ``n_synced`` tokens it was
        behind first.

        A draft model's round starts with a catch-up: one token after a
        rejection, two after a fully accepted round (the last draft and the
        bonus token, a batch costing ~1.6 steps here), many after plain rounds.
        Where the drafter timed it apart, a step is what follows it, and what
        the catch-up costs beyond the one step it stands for is priced per
        round (``draft_extra_ratio``). Counted into the steps, it made short
        drafts look ~30 % dearer per token than long ones; left out, drafting
        looked cheaper than it is where it barely loses (Q8_0).
        """
        if n_synced > SHORT_CATCH_UP:
            # A long catch-up (after plain rounds) is not the per-token cost
            # of drafting in steady speculation: it is priced apart.
            drafting = t_draft_s - t_synced_s if t_synced_s > 0 else n_chain * self.t_draft
            self.observe_catch_up(n_synced, t_draft_s - drafting)
        elif t_synced_s <= 0:
            self.observe_draft(n_chain, t_draft_s)
        else:
            if n_chain > 1:
                self.observe_draft(n_chain - 1, t_draft_s - t_synced_s)
            if self.t_draft > 0:
                self.observe_draft_extra(max(0.0, t_synced_s - self.t_draft))

    def round_cost(self, gamma: int, batch: int) -> float:
        """Seconds of a round that drafts ``gamma`` tokens (its catch-up
        included) and verifies a batch of ``batch`` tokens."""
        drafting = (gamma * self.draft_ratio + self.draft_extra_ratio) * self.t1 if gamma else 0.0
        return drafting + self.verify_cost(batch)

    def catch_up_cost(self, n_tokens: int) -> float:
        """Seconds a drafter needs to catch up on ``n_tokens`` skipped tokens."""
        ratio = self.catch_up_ratio or self.draft_ratio / 2
        return n_tokens * ratio * self.t1

    def curve_key(self) -> tuple[bool, bytes, float, float, float, float]:
        """What ratios of costs depend on (not t1 itself): equal keys, equal
        ``relative_costs``, ``draft_extra_ratio``, catch-up and checked
        copies per token."""
        ratios = (self.draft_ratio, self.draft_extra_ratio, self.catch_up_ratio, self.read_ratio)
        return (self.t1 > 0, self._raw_key(), *ratios)

    def _raw_key(self) -> bytes:
        # Not t1 nor the count of plain rounds (r(1) is 1 whatever they say):
        # a round that is off must find the smoothed curve and the speedups
        # cached (RoundPricing.speedups).
        return (
            self.ratio.tobytes()
            + self._seen.tobytes()
            + self._n_seen[2:].tobytes()
            + self._stale().tobytes()
            + self._kept.tobytes()
        )

    def _stale(self) -> np.ndarray:
        """Index k: whether t(k) was last measured more than STALE_AFTER rounds ago."""
        stale: np.ndarray = self._rounds - self._last_seen > STALE_AFTER
        stale[1] = False  # (every ratio is relative to t1: it is never passed over)
        return stale

    def relative_costs(self, k_max: int) -> tuple[np.ndarray, float]:
        """t_target(k) / t1 for k = 1..k_max, and a draft step / t1 (with
        nothing measured: a batch of k costs k, drafting nothing)."""
        if self.t1 <= 0:
            return np.arange(1, k_max + 1, dtype=float), 0.0
        verify = np.array([self.verify_cost(k) for k in range(1, k_max + 1)]) / self.t1
        return verify, self.draft_ratio

    def verify_cost(self, k: int) -> float:
        """t_target(k) from the smoothed curve (see the class docstring):
        unmeasured sizes interpolated linearly, beyond the largest measured
        one proportional to k."""
        if self.t1 <= 0:
            return float(k)  # nothing measured yet: assume a batch costs k tokens
        curve = self._smoothed_curve()
        if k <= self.k_max:
            return float(curve[k] * self.t1)
        return float(curve[self.k_max] * self.t1) * k / self.k_max

    def _weights(self, sizes: np.ndarray) -> np.ndarray:
        """Each size's weight in the curve: its rounds (at most the memory), plus one."""
        weights: np.ndarray = np.minimum(self._n_seen[sizes], 1.0 / COST_WEIGHT) + 1.0
        return weights

    def _smoothed_curve(self) -> np.ndarray:
        """r(k) for k = 0..k_max as decisions read it: the measured ratios made
        non-decreasing (pooled where a larger batch read cheaper than a
        smaller one, each weighted by the rounds behind it, at most the
        running mean's memory; t1 itself fixed), then interpolated."""
        key = self._raw_key()
        if self._smoothed is not None and self._smoothed[0] == key:
            return self._smoothed[1]
        ks = np.flatnonzero(self._seen[1:]) + 1
        # A size last measured long ago between sizes measured since is left
        # to the interpolation between them. The context grew since: measured
        # on the cost-scaled F32 target with a weaker draft, t(5) read 2.19 t1
        # from early rounds where rounds now measured 1.55, the fit pooled
        # t(4..7) into one step at 2.16, and the policy, which then never
        # drafted 3 or 4 again to see it, ran 0.90 of fixed γ = 4. A stale
        # size beyond the freshest is kept, bounded as below.
        stale = self._stale()[ks]
        if stale.any() and not stale.all():
            ks = ks[~stale | (ks > ks[~stale].max())]
        ratios = self.ratio.copy()
        # A size beyond the largest measured lately (in this session, not
        # stale) reads no dearer than the line those extrapolate to: an
        # overestimate there is never measured again (the policy stops
        # drafting that long), an underestimate is. Kept between sessions on an
        # AVX-512 EPYC, r(11..17) read 3.6-5.1 where rounds read r(9) 2.1-2.6:
        # the policy drafted 8, 0.90 and 0.91 of fixed γ = 16 on the cost-scaled
        # pair, where from a fresh calibration it drafted 13 (1.02).
        lately = ks[(ks > 1) & ~self._stale()[ks] & ~self._kept[ks]]
        beyond = ks[ks > lately.max()] if lately.size else ks[:0]
        if beyond.size:
            line = fresh_line(lately, self.ratio[lately], self._weights(lately))
            ratios[beyond] = np.minimum(ratios[beyond], line(beyond))
        weights = self._weights(ks)
        weights[ks == 1] = np.inf  # r(1) is 1 by definition
        values = non_decreasing(ratios[ks], weights)
        sizes = np.arange(self.k_max + 1)
        curve: np.ndarray = np.interp(sizes, ks, values)
        last = int(ks[-1])
        curve[last + 1 :] = values[-1] * sizes[last + 1 :] / last
        self._smoothed = (key, curve)
        return curve


def chain_speedup(costs: CostModel, acceptance: float, gamma: int) -> float:
    """Expected speedup over plain decoding of rounds that draft ``gamma``
    tokens, each accepted with probability ``acceptance`` once the ones before
    it were: the adaptive policy's model of a round (``GammaController``'s
    ``expected_speedup``) with one acceptance at every position, for what-if
    estimates before anything is measured (a draft not yet made)."""
    tokens = sum(acceptance**i for i in range(gamma + 1))
    cost = costs.round_cost(gamma, gamma + 1)
    plain = costs.round_cost(0, 1)
    return tokens * plain / cost if cost > 0 else 0.0


@dataclass
class AcceptanceModel:
    """Per-position acceptance α_i as exponentially weighted estimates.

    Deep positions are tried rarely (only when every position before them was
    accepted), so their own estimates rest on a few outcomes: one rejection at
    position 9 after five rounds put α_9 at 0.69 while every other position of
    the cost-scaled pair read 0.98, and the policy then drafted 8 where 12-16
    paid best. ``estimate()`` therefore shrinks each position's own estimate
    towards the pooled acceptance of all positions, by POOL_WEIGHT
    pseudo-outcomes: a position with many outcomes keeps its own figure, one
    with few borrows from the rest.
    """

    gamma_max: int
    prior: float = 0.6
    alpha: np.ndarray = field(init=False)  # index i-1: α_i, from position i's outcomes alone
    seen: np.ndarray = field(init=False)  # index i-1: rounds that tried position i

    def __post_init__(self) -> None:
        self.alpha = np.full(self.gamma_max, self.prior)
        self.seen = np.zeros(self.gamma_max, dtype=np.int64)

    def observe(self, outcomes: tuple[bool, ...]) -> None:
        # Positions after the first rejection were never tried: no evidence.
        # A position's own estimate is the mean of its outcomes (the first one
        # sets it), then a running mean; the prior enters through the pool
        # (``estimate``), as PRIOR_WEIGHT outcomes.
        for i, accepted in enumerate(outcomes[: self.gamma_max]):
            self.seen[i] += 1
            weight = max(ACCEPT_WEIGHT, 1.0 / self.seen[i])
            self.alpha[i] += weight * (float(accepted) - self.alpha[i])
        n = len(outcomes)
        if 0 < n < self.gamma_max and all(outcomes):
            # Every draft landed, so nothing was learned about longer drafts.
            # Let the untried positions drift towards the last one tried, so
            # that γ can grow when the text is predictable (exploration).
            tail = self.alpha[n:]
            tail += ACCEPT_WEIGHT / 2 * (self.alpha[n - 1] - tail)

    def _weights(self) -> np.ndarray:
        """Each position's own estimate, in outcomes: those seen, at most the
        running mean's memory (~2 / ACCEPT_WEIGHT)."""
        weights: np.ndarray = np.minimum(self.seen, 2.0 / ACCEPT_WEIGHT - 1.0).astype(float)
        return weights

    def estimate(self) -> np.ndarray:
        """α_i for deciding: each position's own estimate shrunk towards the
        pooled one by POOL_WEIGHT pseudo-outcomes; the prior's drift where
        nothing was seen.

        The pool is the outcome-weighted mean of the positions' own estimates
        with the prior as PRIOR_WEIGHT of one outcome. Each position once
        carried its own share of the prior instead (a fifth after one
        outcome), and so did the pool: after a first probe of 16 drafts that
        all landed, every α_i read 0.92 where the outcomes said 1, and the
        policy drafted 2 on the cost-scaled F16 target until deep positions
        had been tried twice more (fixed γ = 16 ran 1.2x faster on that suite).
        """
        n = self._weights()
        if not n.any():
            unseen: np.ndarray = self.alpha.copy()
            return unseen
        pooled = self._pooled(n)
        shrunk = (n * self.alpha + POOL_WEIGHT * pooled) / (n + POOL_WEIGHT)
        # A position never tried reads the pool: what the positions tried say,
        # with the prior's weight (not the prior alone, which a miss at position
        # 1 would leave at 0.6 from position 2 on).
        estimate: np.ndarray = np.where(self.seen > 0, shrunk, pooled)
        return estimate

    def _pooled(self, n: np.ndarray) -> float:
        """The outcome-weighted mean of the positions' own estimates (weights
        ``n``), with the prior as PRIOR_WEIGHT outcomes."""
        outcomes = float((n * self.alpha).sum()) + PRIOR_WEIGHT * self.prior
        return outcomes / (float(n.sum()) + PRIOR_WEIGHT)

    def kept(self) -> dict[str, list[float]]:
        """What the next session of this pair starts from (``resume``)."""
        return {"alpha": [round(float(a), 4) for a in self.alpha], "seen": self.seen.tolist()}

    def resume(self, kept: Any) -> bool:
        """Start from what an earlier session ``kept`` of this pair, each
        position as at most KEPT_OUTCOMES outcomes; False (and nothing changed)
        where it is not such a record. A record of another γ_max covers the
        positions both have."""
        try:
            alpha = np.asarray(kept["alpha"], dtype=float)[: self.gamma_max]
            seen = np.asarray(kept["seen"], dtype=float)[: self.gamma_max]
        except (KeyError, TypeError, ValueError, IndexError):
            return False
        if alpha.ndim != 1 or alpha.shape != seen.shape or not alpha.size:
            return False
        if not (np.isfinite(alpha).all() and np.isfinite(seen).all()):
            return False
        if alpha.min() < 0 or alpha.max() > 1 or seen.min() < 0:
            return False
        n = alpha.size
        self.alpha[:n] = alpha
        self.seen[:n] = np.minimum(seen, KEPT_OUTCOMES).astype(np.int64)
        return True

    def outcomes(self) -> int:
        """Outcomes seen so far, every position's (each round adds those it tried)."""
        return int(self.seen.sum())

    def optimistic(self, z: float = 1.0) -> np.ndarray:
        """The estimate raised by ``z`` standard errors, at most 1.

        The estimates are means of Bernoulli outcomes over an effective sample
        of the outcomes seen so far (plus the pooled pseudo-outcomes), at most
        ~2 / ACCEPT_WEIGHT: after a few rounds one rejection moves α_i a lot,
        and is worth that little."""
        weights = self._weights()
        # A position never tried knows what the pool knows: its outcomes and the prior's.
        n: np.ndarray = np.where(
            self.seen > 0, weights + POOL_WEIGHT, float(weights.sum()) + PRIOR_WEIGHT
        )
        a = self.estimate()
        optimistic: np.ndarray = np.minimum(1.0, a + z * np.sqrt(a * (1.0 - a) / (n + 1.0)))
        return optimistic

    def expected_tokens(self, gamma: int) -> float:
        """E[tokens | γ] = 1 + Σ_{i≤γ} Π_{j≤i} α_j (with the estimate)."""
        return 1.0 + float(np.cumprod(self.estimate()[:gamma]).sum())


class ConfidenceCalibration:
    """How often a draft's tokens land by how sure the draft was of them: the
    share of the tokens tried in each bucket of confidence that the target
    accepted (``CONFIDENCE_EDGES``), for ``ConfidenceCut`` to read the draft's
    confidence as the chance a token lands. A pair's own: a draft of the
    target's network lands most tokens it is unsure of, another network's
    few."""

    def __init__(self) -> None:
        size = len(CONFIDENCE_EDGES) + 1
        self.landed = np.full(size, LANDING_PRIOR * LANDING_PRIOR_WEIGHT)
        self.tried = np.full(size, LANDING_PRIOR_WEIGHT)

    def observe(self, confidence: tuple[float, ...], outcomes: tuple[bool, ...]) -> None:
        """A round's chain: the draft's confidence in each token and, for each
        one tried, whether it landed (positions after a rejection: no evidence)."""
        for sure, landed in zip(confidence, outcomes, strict=False):
            b = int(np.searchsorted(CONFIDENCE_EDGES, sure))
            self.landed[b] = self.landed[b] * LANDING_MEMORY + float(landed)
            self.tried[b] = self.tried[b] * LANDING_MEMORY + 1.0

    def kept(self) -> dict[str, list[float]]:
        """What the next session of this pair starts from (``resume``)."""
        return {
            "landed": [round(float(x), 4) for x in self.landed],
            "tried": [round(float(x), 4) for x in self.tried],
        }

    def resume(self, kept: Any) -> bool:
        """Start from what an earlier session ``kept``, each bucket as at most
        KEPT_TOKENS tokens; False (and nothing changed) where it is not such
        a record."""
        try:
            landed = np.asarray(kept["landed"], dtype=float)
            tried = np.asarray(kept["tried"], dtype=float)
        except (KeyError, TypeError, ValueError, IndexError):
            return False
        if landed.shape != self.landed.shape or tried.shape != self.tried.shape:
            return False
        if not (np.isfinite(landed).all() and np.isfinite(tried).all()):
            return False
        if tried.min() <= 0 or landed.min() < 0 or (landed > tried + 1e-3).any():
            return False
        scale = np.minimum(1.0, KEPT_TOKENS / tried)
        self.landed, self.tried = landed * scale, tried * scale
        return True

    def landing(self, confidence: float) -> float:
        """The chance a token the draft is ``confidence`` sure of lands."""
        b = int(np.searchsorted(CONFIDENCE_EDGES, confidence))
        return float(self.landed[b] / self.tried[b])
