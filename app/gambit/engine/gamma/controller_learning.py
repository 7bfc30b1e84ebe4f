"""What the γ policy learns from the rounds it sees (``gambit.engine.gamma.controller``).

Only records and updates: the pair's costs (``CostModel``), each drafter
option's acceptance (``AcceptanceModel``), what tree side nodes gain, how long
replies run and how far the draft model is behind the text. The policy
decides from these (``gambit.engine.gamma.controller``), a round's expected pay is
priced from them (``gambit.engine.gamma.controller_pricing``), and the sentences
that explain a decision are ``gambit.engine.gamma.controller_wording``'s.
"""

from __future__ import annotations

from typing import Any

from gambit.engine.drafters.base import Option, SourceKind
from gambit.engine.estimates import (
    ACCEPT_WEIGHT,
    AcceptanceModel,
    ConfidenceCalibration,
    CostModel,
)
from gambit.engine.text.reply import Round, StopReason


class RoundLearning:
    """Measurements from every round and every reading, in every policy mode,
    so that the baseline and the expected speedup stay current when the user
    switches mode."""

    # Before any tree round: tokens gained per side node. SpecInfer-style
    # trees report a few tenths; the first rounds measure the real figure.
    SIDE_GAIN_PRIOR = 0.25
    # Before any reply has ended: its expected length, when max tokens does not
    # cap it lower. Then a running mean (REPLY_WEIGHT) of the replies' lengths.
    REPLY_PRIOR = 256
    REPLY_WEIGHT = 0.3

    def __init__(
        self, costs: CostModel, gamma_max: int, prior_alpha: float = 0.6, kept: Any = None
    ) -> None:
        """``kept``: what a session before kept of this pair (``resume``)."""
        self.costs = costs
        self.gamma_max = gamma_max
        self.prior_alpha = prior_alpha
        self.side_gain = self.SIDE_GAIN_PRIOR  # running mean, per side node sent
        self.reply_length = 0.0  # running mean of replies' lengths (0: none ended yet)
        self.behind = 0  # committed tokens the draft model has not read yet
        self._acceptance: dict[Option, AcceptanceModel] = {}  # per drafter option
        self._landing: dict[Option, ConfidenceCalibration] = {}  # per drafter option
        self._costs_at: dict[int, CostModel] = {}  # per thread count, but the current one
        # What a session before kept of this pair (``resume``), per option's
        # ``option_key``, for options this session has not drafted for yet.
        self._kept: dict[str, Any] = {}
        self.resume(kept)
        self._reply_tokens = 0  # in the current reply

    def at_threads(self, n: int, was: int, stored: CostModel | None = None) -> None:
        """Price rounds at ``n`` CPU threads from now on, ``was`` until now: the
        costs measured at ``n`` earlier in this session, else ``stored`` (kept
        by a session before), else those at ``was`` with t1 scaled by was/n
        (a decode's work splits over its threads; the ratios, a draft step's
        included, carry over, and the rounds at ``n`` correct them)."""
        self._costs_at[was] = self.costs
        costs = self._costs_at.get(n) or stored
        if costs is None:
            costs = self.costs.copy()
            costs.t1 *= was / n
        self.costs = costs

    def costs_by_threads(self, current: int) -> dict[int, CostModel]:
        """The costs measured at each thread count (``current``: those in use now)."""
        return {**self._costs_at, current: self.costs}

    def acceptance(self, option: Option) -> AcceptanceModel:
        """What rounds of ``option`` showed (the prior, for one not seen yet)."""
        model = self._acceptance.get(option)
        if model is None:
            model = self._acceptance[option] = AcceptanceModel(self.gamma_max, self.prior_alpha)
            if kept := self._kept_for(option):
                model.resume(kept.get("acceptance"))
        return model

    def landing(self, option: Option) -> ConfidenceCalibration:
        """How ``option``'s draft tokens landed by the draft's confidence in them."""
        model = self._landing.get(option)
        if model is None:
            model = self._landing[option] = ConfidenceCalibration()
            if kept := self._kept_for(option):
                model.resume(kept.get("landing"))
        return model

    def _kept_for(self, option: Option) -> dict[str, Any] | None:
        """What a session before kept of ``option`` (``resume``), if anything."""
        return self._kept.get(option_key(option)) if self._kept else None

    def kept(self) -> dict[str, Any]:
        """What the next session of this pair starts from (``resume``): each
        option's acceptance and how its tokens landed, as far as rounds were
        drafted for it (this session's, else what it resumed from), and how
        long replies run."""
        options = dict(self._kept)
        for option, model in self._acceptance.items():
            if model.seen.any():
                options[option_key(option)] = {
                    "acceptance": model.kept(),
                    "landing": self.landing(option).kept(),
                }
        return {"options": options, "reply_length": self.reply_length}

    def resume(self, kept: Any) -> None:
        """Start from what a session before ``kept`` of this pair: an option's
        record becomes its prior when it is first drafted for (before that,
        none of it is read). Anything that is not such a record is ignored:
        a damaged file costs the memory, never a start."""
        if not isinstance(kept, dict):
            return
        options = kept.get("options")
        if isinstance(options, dict):
            self._kept = {str(k): v for k, v in options.items() if isinstance(v, dict)}
        length = kept.get("reply_length")
        if isinstance(length, (int, float)) and 0 < length < 1e6:
            self.reply_length = float(length)

    def expected_reply_length(self, horizon: int = 0) -> float:
        """Tokens the coming reply is expected to have: the running mean of
        earlier replies (a prior before any), at most ``horizon`` (0: no cap)."""
        expected = self.reply_length or float(self.REPLY_PRIOR)
        return min(expected, float(horizon)) if horizon > 0 else expected

    @property
    def prompt_unread(self) -> bool:
        """Whether the draft model has not read the current reply's prompt:
        it is behind by more than the reply's own tokens."""
        return self.behind > self._reply_tokens

    def start_reply(self, n_context: int) -> None:
        """A reply starts on ``n_context`` prompt tokens the draft model has not read."""
        self.behind = n_context
        self._reply_tokens = 0

    def observe_reading(self, n_read: int, seconds: float) -> None:
        """The draft model read the ``n_read`` tokens it was behind in ``seconds``."""
        self.behind = 0
        if n_read > 2 and seconds > 0:
            self.costs.observe_catch_up(n_read, seconds)

    def observe(self, rnd: Round, option: Option) -> None:
        """One round drafted as ``option``, or a plain one."""
        if rnd.tokens:
            self.costs.observe_verify(rnd.n_catch_up + rnd.n_drafted + 1, rnd.t_verify_s)
        # (a free source's round leaves the draft model behind as a plain one does)
        drafted_by_model = rnd.n_drafted and option.kind is not SourceKind.FREE
        self.behind = 0 if drafted_by_model else self.behind + len(rnd.tokens)
        if rnd.n_drafted:
            if option.kind is SourceKind.READ:
                # A checked copy: a batch and the steps after a stray, priced
                # per token apart (they say nothing of one step's cost).
                self.costs.observe_read(rnd.n_drafted, rnd.t_draft_s)
            elif option.kind is SourceKind.MODEL:
                # Side nodes cost the drafter nothing extra: it decodes its main chain only.
                self.costs.observe_drafting(
                    rnd.n_drafted - rnd.n_side,
                    rnd.t_draft_s,
                    rnd.n_draft_synced,
                    rnd.t_draft_synced_s,
                )
            self.acceptance(option).observe(rnd.chain_outcomes)
            if rnd.confidence:
                self.landing(option).observe(rnd.confidence, rnd.chain_outcomes)
            if rnd.n_side:
                gain = rnd.side_gain / rnd.n_side
                self.side_gain += ACCEPT_WEIGHT * (gain - self.side_gain)
        self._reply_tokens += len(rnd.tokens)
        if rnd.stop is not None and rnd.stop is not StopReason.CANCELLED:
            n, mean = self._reply_tokens, self.reply_length
            self.reply_length = mean + self.REPLY_WEIGHT * (n - mean) if mean else float(n)


def option_key(option: Option) -> str:
    """How ``option`` is named in what a session keeps (``RoundLearning.kept``)."""
    return f"{option.kind.value}/{option.bucket}/{option.source}"
