"""When to bet: adaptive γ, an automatic off-switch and probing, from measurements.

Speculation pays when the expected tokens per round outrun what the round
costs. With per-position acceptance α_i (the chance the i-th draft token is
accepted given the ones before it were), a round with γ draft tokens yields

    E[tokens | γ] = 1 + Σ_{i=1..γ} Π_{j=1..i} α_j

and costs γ·t_draft + t_target(γ+1), where t_target(k) is the time to verify
a batch of k tokens *on this machine* (on a CPU it grows with k; on a GPU it
barely does). Plain decoding yields 1 token per t_target(1). The policy picks
the γ in 0..γ_max with the best expected rate; γ = 0 means speculation off.

Acceptance is learned in proportion to the evidence (``AcceptanceModel``):
one outcome is one outcome, the prior weighs as a few, and recent rounds
weigh more than old ones, so the estimate follows a reply from prose into a
copied passage without flapping on one round's noise. A session starts from
what sessions before learned of its pair (``RoundLearning.resume``, each
position as a few outcomes), not from the generic prior: a pair's first
reply then drafts as its last session found it pays.

While off, nothing is learned about acceptance, so the policy probes: a
draft of the length that would pay best with acceptance as optimistic as the
evidence allows (an option's first probe, with nothing seen, the best case), as
often as keeps probing under a share of the plain
decoding time: 2 % once much is known, up to 20 % while little is, the
outcomes seen counting less as the text moves on (a failed probe
wastes its draft and the larger batch; a draft model must first re-read what
it skipped). An option that is off while another runs (a lookup bucket next
to the draft model) is probed on the same terms, its cost counted against
the option that runs. Hysteresis (switch on above +5 %, off below ±0 %)
keeps it from flapping on noise.

Reading is a cost too. A draft model reads each prompt before it can draft,
and on a CPU a small quantized draft may read slower than the target does
(measured: SmolLM2 Q4_1 prompt processing at 297 tokens/s, its F32 target at
580). So a reply decodes plainly, and says why, where even drafts that all
land could not save what reading its prompt costs over the reply's expected
length (learned from earlier replies, capped by max tokens): a long prompt
and a short answer.

Switching off is not free either: a draft model switched off must re-read
what it skipped before it is tried again. So it switches off only where
drafting would not pay even with acceptance OFF_Z standard errors above its
estimate, which after a few rounds is worth little; and a probe switches it
on unless the same optimistic estimate says it cannot pay, so that one
missed first token is weighed with the rounds after it, not alone. Optimism
keeps it on only while the estimate itself expects a round to lose less than
EXPLORE_FLOOR allows.

Within a round, the draft says where it is unsure. γ is the most a round
drafts; a draft model's chain stops early once the chance its next token
lands, by the draft's own confidence read through how such tokens have
landed for this pair (``ConfidenceCut``), is below what drafting and
verifying one more token costs at the rate the round is expected to make
(``decided_cut``). The policy's γ sets how far
a round may go on what positions 1..γ have shown; the cut stops it where this
round's text is harder than that.

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
round is expected to pay more, each with its own acceptance (by option, as
optimistic as its own evidence allows: an option tried once is tried again
until its estimate stands on its own) and its own cost: a lookup draft costs
no draft steps, but the draft model must read the tokens it supplied before
it drafts again, so each is priced at that catch-up
(``CostModel.catch_up_cost``). A lookup copy can also be offered checked by
the draft model (read in one batch, cut where the model's top
choice differs): priced at reading γ tokens now, with the acceptance
learned for checked copies apart. It is an option only where the model
reads a token for well under a draft step (a GPU, where a batch costs about
one step); where reading costs about what drafting does (a small quantized
draft on a CPU) the check costs what the model's own chain does.

Everything here is measured (``gambit.engine.estimates``): ``CostModel`` is
calibrated at load (``calibrate``) and updated from every round's timings and
every prompt the drafter reads; ``AcceptanceModel`` from every round's outcomes.

The policy is three pieces, each testable alone: ``RoundLearning`` records
what rounds and readings show (``gambit.engine.gamma.controller_learning``),
``RoundPricing`` prices every round shape from that and changes nothing
(``gambit.engine.gamma.controller_pricing``), and ``GammaController`` here decides:
the mode, on or off per drafter option, probes, sitting a reply out. Its
sentences are ``gambit.engine.gamma.controller_wording``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gambit.engine.drafters.base import ConfidenceCut, Option, SourceKind
from gambit.engine.estimates import PRIOR_WEIGHT, AcceptanceModel, CostModel
from gambit.engine.gamma import controller_wording as wording
from gambit.engine.gamma.controller_learning import RoundLearning
from gambit.engine.gamma.controller_pricing import RoundPricing
from gambit.engine.gamma.policy import (
    DEFAULT_GAMMA,
    DEFAULT_GAMMA_MAX,
    SWITCH_ON_ABOVE,
    Decision,
    PolicyMode,
)
from gambit.engine.text.reply import Round

# The option a controller decides for before a drafter offers one (tests,
# fixed policies; a session names its drafter's own: ``Engine``).
UNNAMED = Option("")


class GammaController:
    """Chooses γ for each round (``GammaPolicy``), and keeps measuring whatever the mode.

    - ``adaptive``: the γ in 0..γ_max with the best expected tokens per second;
      off when no γ beats plain decoding, with probes to switch back on.
    - ``fixed``: always ``fixed_gamma``.
    - ``off``: never speculate.

    Costs and acceptance are learned from every round in every mode
    (``learning``), so the baseline and the expected speedup stay current
    when the user switches. ``decision`` is the last round's, with its reason.
    """

    ON_ABOVE = SWITCH_ON_ABOVE
    OFF_BELOW = 1.0
    # Probing costs something (a draft model must catch up on skipped text):
    # only probe where the best case, every draft accepted, is clearly a win.
    PROBE_CEILING = 1.2
    PROBE_BASE = 16  # the fewest plain tokens between probes
    PROBE_MAX = 2048  # the most: the text may have changed since
    # While off, probing may cost at most this share of the plain decoding
    # time it interrupts, once much is known of the option: a probe that
    # fails wastes its draft and the larger verification batch, and a draft
    # model must first catch up on every token it skipped (measured: ~0.2 of
    # a target token each on a toy pair's CPU, ~0.03 on the cost-scaled ones;
    # up to 256 of them). So a cheap probe (prompt lookup) comes every few
    # dozen tokens, a costly one waits for the start of a reply, where the
    # draft reads the prompt during prompt processing, or until it is paid
    # for. (It was 3 %, all the time; with the larger share below while
    # little is known, 2 % keeps a draft that never lands at ~3 % over 4,000
    # tokens, catching up included.)
    PROBE_BUDGET = 0.02
    # ... and while little is known of an option, up to this share
    # (``_probe_share``): a draft model switched off by its first rounds is
    # probed again within the reply. Gemma ×4 with SmolLM2 missed the first
    # token of its first two rounds on a prose prompt, then landed 16 of 16
    # once on track; catching up costs ~0.03 of a target step a token there,
    # the whole of a 3 % budget, so it came back only at the next reply.
    # Replayed on that pair's measured costs with 12 hard tokens before easy
    # ones (/1 = the best fixed γ): 0.76 at 0.06, 0.93 at 0.10, 0.98 at 0.15,
    # 1.03 at 0.25, a draft landing 3 % at 0.98x target-only throughout.
    PROBE_BUDGET_THIN = 0.20
    # Tokens since its last probe after which what an option's rounds showed
    # counts half as much in its probe budget (``_probe_share``): the text has
    # moved on. Replayed as above with 40 hard tokens before easy ones: 1.11x
    # the best fixed γ without it, 1.17x at 128 (1.24x at 64, where a draft
    # that never lands cost 3.3 % over 4,000 tokens; 3.1 % at 128).
    EVIDENCE_HALF_LIFE = 128
    # ... but not where even the estimate says a round loses more than this:
    # optimism per position compounds over a round's draft, and Gemma-3-270M
    # drafting through text for SmolLM2 ×4 (a draft step ~0.3 of a target
    # step, ~2 target steps a round of 4) stayed on for 8 rounds expected at
    # 0.69-0.89x after a probe whose 3 drafts landed.
    EXPLORE_FLOOR = 0.85
    # Switching off needs acceptance this many standard errors above its
    # estimate to lose (``_unlikely_to_pay``).
    OFF_Z = 1.5
    # While on, γ is what pays best with acceptance this many standard errors
    # above its estimate: positions rarely tried (deep ones, behind a short γ)
    # get tried, so a draft whose later tokens land more often than its first
    # (a copy once it is on track: 0.68 at position 1, 0.9-1.0 from 4 on, on
    # Gemma ×4's prose) is drafted long. Replayed on that pair's measured
    # acceptance and costs, 160-token replies from nothing learned: adaptive ÷
    # the best fixed γ 0.90-0.95 at 0, 0.94-0.97 at 0.5, 0.87-0.98 at 1.5.
    EXPLORE_Z = 0.5

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
        option: Option = UNNAMED,
        threads: int = 1,
        stored_costs: Callable[[int], CostModel | None] | None = None,
        kept: Any = None,
    ) -> None:
        """``side_max``: most tree side nodes per round (0: chains only);
        ``node_max``: most draft tokens per round, chain and side nodes
        together (default γ_max + side_max); ``option``: what the first
        decision is for, before the drafter offers any (its draft model's
        option); ``threads``: the
        CPU threads ``costs`` were measured at; ``stored_costs``: the costs a
        session before kept for another count, if any (``at_threads``);
        ``kept``: what a session before learned of this pair's acceptance
        (``RoundLearning.kept``), to start from instead of the prior."""
        if gamma_max < 1:
            raise ValueError("gamma_max must be 1 or more")
        side_max = max(0, side_max)
        node_max = gamma_max + side_max if node_max is None else max(1, node_max)
        if costs.k_max < min(node_max, gamma_max + side_max) + 1:
            raise ValueError("the cost model must cover every verification batch size")
        self.mode: PolicyMode = mode
        self.gamma_max = gamma_max
        self.fixed_gamma = max(0, min(fixed_gamma, gamma_max))
        self.fixed_side = max(0, min(fixed_side, side_max))
        self.learning = RoundLearning(costs, gamma_max, prior_alpha, kept)
        self.pricing = RoundPricing(self.learning, gamma_max, side_max, node_max)
        self.threads = threads
        self._stored_costs = stored_costs
        # Per drafter option (Drafter.option): whether speculation is on for its rounds.
        self._on: dict[Option, bool] = {}
        self._option = option  # the current round's (the last decide_gamma's)
        # Per drafter option: tokens since it was probed or switched off. The first
        # reply may probe at once: the prior is only a guess.
        self._since_probe: dict[Option, int] = {}
        self._probing = False
        # An option that is off, chosen to be probed while another runs (choose).
        self._reprobe: Option | None = None
        # Why the current reply decodes plainly: reading its prompt would not
        # pay (decide_reading); None: it drafts as decided round by round.
        self._sit_out: str | None = None
        self._track(option)
        self.decision = self._decide()

    def _track(self, option: Option) -> None:
        """Start keeping ``option``'s on/off state, from what the calibration and
        the acceptance prior predict (nothing is drafted for it yet)."""
        if option not in self._on:
            alpha = self.learning.acceptance(option).estimate()
            speedups = self.pricing.speedups(alpha, option.kind)
            self._on[option] = float(speedups.max()) >= self.OFF_BELOW

    @property
    def costs(self) -> CostModel:
        """The pair's costs, as measured so far."""
        return self.learning.costs

    @property
    def acceptance(self) -> AcceptanceModel:
        """Acceptance as learned for the current option (the last ``decide_gamma``'s)."""
        return self.learning.acceptance(self._option)

    @property
    def on(self) -> bool:
        """Whether speculation is on for rounds of the current option."""
        return self._on[self._option]

    @on.setter
    def on(self, value: bool) -> None:
        self._on[self._option] = value

    @property
    def baseline_tokens_per_s(self) -> float:
        """Plain decoding's rate on this machine, model and context: 1 / t_target(1)."""
        return self.pricing.baseline_tokens_per_s

    def ceiling_speedup(self) -> float:
        """The best expected speedup for the current option if every draft landed."""
        return self.pricing.ceiling(self._option.kind)

    @property
    def probe_gamma(self) -> int:
        """The γ of a probe of the current option (``RoundPricing.probe_gamma``):
        sized by its acceptance as optimistic as the evidence allows, once
        anything was seen; before that, what would pay best if every draft
        landed. A first probe measures every position it may pay to draft:
        sized by the prior (γ = 8 on the realistic pair), the first reply of a
        session ran 0.81-0.87 of fixed γ = 16 in three runs (a 57-token reply
        is six rounds); where it misses, it costs about three target steps."""
        option = self._option
        return self.pricing.probe_gamma(option.kind, self._probe_acceptance(option))

    def _probe_acceptance(self, option: Option) -> np.ndarray | None:
        """The acceptance a probe of ``option`` is sized by (None: every draft landing)."""
        acceptance = self.learning.acceptance(option)
        return acceptance.optimistic() if acceptance.seen.any() else None

    def probe_cost(self, catch_up: int = 0, option: Option | None = None) -> float:
        """Seconds a probe of ``option`` (default: the current one) costs if
        none of its drafts lands."""
        o = self._option if option is None else option
        return self.pricing.probe_cost(o.kind, catch_up, self._probe_acceptance(o))

    @property
    def _tokens_since_probe(self) -> int:
        """Tokens since the current option was probed or switched off."""
        return self._since_probe.get(self._option, self.PROBE_MAX)

    @_tokens_since_probe.setter
    def _tokens_since_probe(self, tokens: int) -> None:
        self._since_probe[self._option] = tokens

    # -- GammaPolicy
    def start_reply(self, n_context: int) -> None:
        """A reply starts on ``n_context`` prompt tokens the drafter has not read."""
        self.learning.start_reply(n_context)
        self._sit_out = None

    def decide_reading(self, n_read: int = 0, horizon: int = 0) -> bool:
        """Whether the drafter reads the prompt now (``n_read`` tokens) for a
        reply of at most ``horizon`` more tokens (0: unknown). Where it does
        not, the reply decodes plainly (``_sit_out`` says why) unless a probe
        or the drafter's own catch-up brings it back."""
        if self.mode != "adaptive":
            return self.mode == "fixed" and self.fixed_gamma > 0
        if not any(self._on.values()):
            # Read only for a probe the budget covers, the reading counted:
            # else the next reply's start is the cheaper time (``_waits_for_reply``).
            # A probe read for free on a draft that lands 1-5 % made 0.93-0.98x
            # target-only after the first token, 0.91-0.98 per prompt (replayed
            # on its recorded replies: 0.99x priced, the decoding rate the same).
            return self._probe_due(n_read)
        if n_read == 0:
            return True  # reading is free (prompt lookup)
        # Sit the reply out only where even drafts that all land could not
        # repay the reading: the expected speedup is an estimate, and measured
        # here it ran below what fixed γ = 8 made (1.2-1.3x against 1.4-1.5x
        # on F32 + Q4_1), so pricing with it sat out replies that paid.
        ceiling = self.ceiling_speedup()
        tokens = self.learning.expected_reply_length(horizon)
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
        self.learning.observe_reading(n_read, seconds)

    def _probe_share(self, option: Option) -> float:
        """The share of decoding time probes of ``option`` may cost: PROBE_BUDGET
        once much is known of it, up to PROBE_BUDGET_THIN while little is."""
        # What was seen long ago says less of the text now: the outcomes count
        # half as much every EVIDENCE_HALF_LIFE tokens since the last probe.
        since = self._since_probe.get(option, self.PROBE_MAX)
        outcomes = self.learning.acceptance(option).outcomes()
        evidence = outcomes * math.pow(0.5, since / self.EVIDENCE_HALF_LIFE)
        # (squared: a quarter of the way at PRIOR_WEIGHT outcomes, close to
        # PROBE_BUDGET after a few dozen; a draft model's catch-up alone costs
        # ~PROBE_BUDGET a token, so probes of one that keeps missing come
        # further and further apart)
        thin = (PRIOR_WEIGHT / (PRIOR_WEIGHT + evidence)) ** 2
        return self.PROBE_BUDGET + (self.PROBE_BUDGET_THIN - self.PROBE_BUDGET) * thin

    def _probe_due(
        self, catch_up: int = 0, option: Option | None = None, rival: float = 1.0
    ) -> bool:
        """Whether a probe of ``option`` (default: the current one) now keeps
        probing within its budget, after the drafter catches up on
        ``catch_up`` tokens. ``rival``: the expected speedup of the option the
        probe displaces (1.0: plain decoding): where another option runs, a
        probe costs the time that option would have saved, and the budget is a
        share of the time it took."""
        h = self._option if option is None else option
        since = self._since_probe.get(h, self.PROBE_MAX)
        t1 = self.costs.verify_cost(1)
        if h.kind is SourceKind.FREE:
            catch_up = 0  # (no draft model reads anything before a lookup probe)
        cost = self.probe_cost(catch_up, h) + t1 * (1.0 - 1.0 / rival)
        budget = self._probe_share(h) * since * t1 / rival
        if self.pricing.ceiling(h.kind) <= self.PROBE_CEILING:
            # Nothing could pay, by the costs as measured; but batch costs
            # measured while nothing drafts are the load-time calibration's,
            # and one noisy calibration must not rule speculation out for
            # good (measured: F32 + draft calibrated at t5/t1 2.07 instead of
            # 1.6, and left at 1.02x where fixed γ=8 made 1.22x). So a probe
            # re-measures them every PROBE_MAX tokens, within the budget.
            return since >= self.PROBE_MAX and cost <= budget
        if since >= self.PROBE_MAX:
            return True
        return since >= self.PROBE_BASE and cost <= budget

    def _waits_for_reply(self, option: Option) -> bool:
        """Whether a probe of ``option`` waits for the next reply's start: its
        draft model skipped this reply's prompt, so a probe now would read the
        prompt and every token since, more than the next prompt costs to read
        then (``decide_reading`` prices that reading). Probing mid-reply with
        that catch-up, the same 1-5 % draft kept its cost (0.97x by decoding
        rate, replayed) and only moved it out of the prompt processing. Not
        past PROBE_MAX tokens since its last probe: within one long reply too,
        it is probed again within a bounded number of tokens."""
        if option.kind is SourceKind.FREE or not self.learning.prompt_unread:
            return False
        return self._since_probe.get(option, self.PROBE_MAX) < self.PROBE_MAX

    def decided_side_nodes(self) -> int:
        """Side nodes for the round ``decide_gamma`` just chose (0 while off or probing)."""
        return self.decision.side if self.decision.gamma else 0

    def decided_cut(self) -> ConfidenceCut | None:
        """Where the chain ``decide_gamma`` just chose stops early: once the
        chance its next token lands with all before it, by the draft model's
        confidence in the chain read through how such tokens landed
        (``RoundLearning.landing``), is below what drafting and verifying a
        token costs, weighed by the rate this round is expected to make
        (``RoundPricing.cut_floor``). So γ is the most a round drafts, and
        the draft itself says where, within it, it is too unsure to go on.
        Replayed on six raw prompts of Gemma-3-270M ×4 drafted through text
        by SmolLM2 (recorded at temperature 0, 160 tokens each), the policy
        made 2.34x with the cut against 2.08x without (fixed γ = 8: 2.05x).
        None outside the adaptive mode, for trees and for sources without a
        draft model's confidence (copies)."""
        d = self.decision
        if not self._cuts(d.gamma, d.side):
            return None
        landing = self.learning.landing(self._option).landing
        return ConfidenceCut(self.pricing.cut_floor(d.gamma, d.expected_speedup), landing)

    def _cuts(self, gamma: int, side: int) -> bool:
        """Whether a round of ``gamma`` drafts and ``side`` side nodes of the
        current option is cut where the draft is unsure (``decided_cut``)."""
        model = self._option.kind is SourceKind.MODEL
        return self.mode == "adaptive" and gamma >= 2 and not side and model

    def decide_gamma(self, option: Option | None = None) -> int:
        """Decide this round (``decision``) for a draft as ``option`` (None: the
        current one) says: its γ."""
        option = self._option if option is None else option
        self._option = option
        self._track(option)
        self.decision = self._round_decision(reprobe=self._reprobe == option)
        self._reprobe = None
        if self.decision.probing:
            self._probing = True  # (observe() judges the probe's outcome)
        return self.decision.gamma

    def _round_decision(self, reprobe: bool = False) -> Decision:
        """This round's decision: the policy's, or a probe, or sitting out;
        ``reprobe``: ``choose`` took this option, which is off, to probe it."""
        decided = self._decide()
        if self.mode == "adaptive" and self._sit_out is not None:
            return Decision(0, 1.0, decided.best_speedup, self._sit_out)
        # An option never drafted for is probed (below), on or off: its acceptance
        # is only the prior, and a probe's long draft measures more of it.
        untried = not self.acceptance.seen.any()
        if self.mode != "adaptive" or (self.on and not untried):
            return decided
        ceiling = self.ceiling_speedup()
        cannot_pay = ceiling <= self.PROBE_CEILING
        due = not self._waits_for_reply(self._option) and self._probe_due(self.learning.behind)
        if (untried and not cannot_pay) or reprobe or due:
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

    def at_threads(self, n: int) -> None:
        """Rounds run on ``n`` threads from now on: priced with the costs of
        that count (``RoundLearning.at_threads``), and decided again."""
        if n == self.threads or n < 1:
            return
        stored = self._stored_costs(n) if self._stored_costs is not None else None
        self.learning.at_threads(n, self.threads, stored)
        self.threads = n
        self.decision = self._decide()

    def costs_by_threads(self) -> dict[int, CostModel]:
        """The costs measured at each thread count this session."""
        return self.learning.costs_by_threads(self.threads)

    def observe(self, rnd: Round) -> None:
        """Learn from the round just played, then switch on or off as it says."""
        self.learning.observe(rnd, self._option)
        for option in self._on:
            since = self._since_probe.get(option, self.PROBE_MAX)
            self._since_probe[option] = since + len(rnd.tokens)
        best = self._best()[2]
        if self._probing:
            # On where it pays by the estimate, or may by the optimistic one
            # where drafting can gain more than a little: one probe is a few
            # outcomes, and the rounds after it say more.
            self._probing = False
            self._tokens_since_probe = 0
            may_pay = self.ceiling_speedup() > self.PROBE_CEILING and not self._unlikely_to_pay()
            self.on = best > self.ON_ABOVE or (best >= self.EXPLORE_FLOOR and may_pay)
        elif (
            self.on
            and best < self.OFF_BELOW
            and (best < self.EXPLORE_FLOOR or self._unlikely_to_pay())
        ):
            self.on = False
            self._tokens_since_probe = 0
        elif not self.on and best > self.ON_ABOVE:
            self.on = True

    def _unlikely_to_pay(self) -> bool:
        """Whether drafting would not pay even if acceptance were OFF_Z
        standard errors better than estimated. Switching off is not free: a
        draft model must re-read what it skipped before it can be tried again,
        so its probes are rare. Simulated at α = 0.95 with F32 + Q4_1 costs
        (γ = 8 makes 1.18x), switching off on the estimate alone left a draft
        model off for 98 % of the rounds after two early rejections. At one
        standard error, Gemma ×4 drafted through text switched off after two
        missed first tokens at the start of a reply; replayed on a weaker draft
        (55 % landing), adaptive ÷ the best fixed γ went from 0.95 at 1 to 0.99
        at 1.5, a draft landing 3 % still off within a few rounds."""
        alpha = self.acceptance.optimistic(self.OFF_Z)
        optimistic = self.pricing.speedups(alpha, self._option.kind)
        return float(optimistic.max()) < self.OFF_BELOW

    def choose(self, options: Sequence[Option]) -> Option:
        """The option (one per source, the drafter's preferred first) whose
        round is expected to pay best, by its own acceptance (as optimistic as
        its own evidence allows) and cost; an
        option never drafted for first (``decide_gamma`` probes it: its
        acceptance is only the prior). Outside the adaptive mode, the
        drafter's preference."""
        if not self.pricing.reading_is_cheap():
            options = [o for o in options if o.kind is not SourceKind.READ] or options
        if self.mode != "adaptive" or len(options) < 2:
            return options[0]
        chosen, best = options[0], -float("inf")
        off = []
        for option in options:
            self._track(option)
            acceptance = self.learning.acceptance(option)
            if not acceptance.seen.any():
                return option
            on = self._on[option]
            # Judged as optimistically as each option's γ is (EXPLORE_Z): an
            # option tried once (a copy that landed 11 of 11) reads well below
            # one tried a hundred times at the same rate, and judged by the
            # estimate it was never chosen again to show otherwise.
            speedup = (
                self.pricing.optimistic_best(acceptance, option.kind, self.EXPLORE_Z)
                if on
                else self.OFF_BELOW
            )
            if speedup > best:
                chosen, best = option, speedup
            if not on:
                off.append(option)
        # An option that is off is probed again on the same terms as a lone
        # drafter's, its cost counted against the one that runs: else a lookup
        # bucket switched off stayed off for as long as the draft model ran.
        for option in off:
            if option == chosen or self._waits_for_reply(option):
                continue
            if self._probe_due(self.learning.behind, option, max(best, 1.0)):
                self._reprobe = option
                return option
        return chosen

    def _best(self) -> tuple[int, int, float]:
        """The best (γ, side nodes) for the current option, and its expected speedup."""
        return self.pricing.best(self.acceptance, self._option.kind)

    def _decide(self) -> Decision:
        """The policy's decision from what it knows now (no probing)."""
        gamma, side, best = self._best()
        if self.mode == "off":
            return Decision(0, 1.0, best, "off: the policy is off (--policy off)")
        if self.mode == "fixed":
            g, w = self.fixed_gamma, self.fixed_side if self.fixed_gamma else 0
            s = self.pricing.expected_speedup(self.acceptance, g, w)
            return Decision(g, s, best, wording.fixed_reason(g, w, s, self.OFF_BELOW), side=w)
        if self.on:
            gamma, side, expected = self.pricing.explore(
                self.acceptance, self._option.kind, self.EXPLORE_Z
            )
            cut = self._cuts(gamma, side)
            reason = wording.on_reason(gamma, side, expected, self.OFF_BELOW, cut)
            return Decision(gamma, expected, best, reason, side=side)
        return Decision(0, 1.0, best, wording.off_reason(best, self.ON_ABOVE, self.OFF_BELOW))
