"""What a reply measured, from its ``Round`` events: the one place where every
figure Gambit shows is defined. The reply footer, the statistics panel, the
``gambit-cli generate`` summary line and ``gambit-cli bench`` all take their
numbers (and their formatting) from here.

- tokens_per_s (a reply's rate): reply tokens / generation time. Generation
  time is the wall time of the reply less its prompt processing: the
  target's, before the first token, and a draft model's reading of the
  prompt, after the first token (``Round.t_prompt_s``). Prompt processing
  counts in ttft_ms (the target's) and in end-to-end rates. The same
  figure while a reply streams (so far) and at its end.
- baseline_tokens_per_s: plain decoding's rate as the user's plain replies
  get it (``reply_baseline``). A reply that has drafted nothing (speculation
  off, no drafter, a controller that stayed off) *is* plain decoding: its
  baseline is its own rate, the same figure as tokens_per_s, mid-reply
  included. A reply that drafted is compared with plain decoding on its own
  context (``plain_tokens_per_s``): one plain step (decode a token, pick it)
  re-timed at its end, plus what each of its rounds cost outside drafting and
  verifying (committing, streaming, the caller's work between rounds), which
  a plain reply pays once per token (``Engine.finish_reply``). While it
  streams it is compared with the baseline the last reply ended with
  (``Engine.baseline_tokens_per_s``, which changes only when a reply ends or
  the models load): the figure never moves within a reply but once, at its
  end. A message that got no reply (refused, or stopped before its first
  token) has no baseline.
- speedup: tokens_per_s / baseline_tokens_per_s, claimed only for a reply
  that drafted at least one token. A reply without drafting (speculation off,
  no drafter, or a controller that never drafted) placed no bet: it has no
  speedup (``None``, shown as "—"), never a ratio of two plain rates, which
  would only measure noise. Nor against a baseline timed under other
  conditions: the thread count follows the load
  (``gambit.engine.machine.threads``), so a reply whose rounds ran on another
  count than its baseline's, or on several, claims nothing and says why
  (``withheld_because``). ``gambit-cli bench`` divides by a stronger
  baseline: the target-only runs of the same prompts in the same run; a mode
  that drafted nothing did the target-only work, so its speedup is 1.0 by
  definition.
- acceptance_rate: accepted draft tokens / drafted tokens over the reply (a
  tree's side nodes count as drafted); none without drafting.
- acceptance_rate_rolling: the same over the last ``WINDOW`` rounds that
  drafted (so it has a value as soon as one round drafted).
- tokens_per_s_rolling: reply tokens of the last ``WINDOW`` rounds / the wall
  time they took (the panel's chart: how the rate moves within a reply).
- ttft_ms: time to first token, from the request to the first visible token
  (prompt processing included).
- inter-token latency: for each reply token after the first, the time since
  the previous token arrived. Tokens that arrive together in one round count
  as one gap of the round's duration followed by gaps of 0, because that is
  what the reader sees. p50 / p99 are percentiles of these gaps.
- accepted_by_drafter: accepted draft tokens by the drafter that drafted
  them, where one drafter has two sources (draft model + lookup).
- acceptance_by_position: for each depth d, the share of rounds that reached
  depth d in which a draft token at depth d was accepted (for a chain: the
  per-position acceptance α_d).
- mean_accepted: accepted draft tokens per round that drafted anything.
- tokens_per_round: reply tokens per target pass (1 for plain decoding).
- overhead_share: share of wall time spent outside ``llama_decode`` (Python,
  numpy, sampling, verification) over the whole request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from gambit.engine.drafters.registry import DRAFTERS
from gambit.engine.text.reply import GRAMMAR_SOURCE, Round
from gambit.words import counted

# A drafter's name (Drafter.name, its short name) -> its tag: "lookup", "draft".
_SOURCE_TAGS = {spec.short: spec.tag for spec in DRAFTERS.values()}


@dataclass
class GenerationStats:
    n_tokens: int = 0
    n_rounds: int = 0
    n_spec_rounds: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    elapsed_s: float = 0.0
    decode_s: float = 0.0  # time inside llama_decode, all models
    t_draft_s: float = 0.0
    t_verify_s: float = 0.0
    n_side: int = 0  # tree side nodes verified
    side_gain: int = 0  # draft tokens accepted thanks to side nodes
    gaps_s: list[float] = field(default_factory=list)
    # Per draft position i (index i - 1): rounds that tried it, and accepted it.
    tried_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    # Accepted draft tokens by what drafted them (Round.drafted_by).
    accepted_by_drafter: dict[str, int] = field(default_factory=dict)
    # The CPU thread counts its rounds decoded on, in order (they follow the load).
    thread_counts: list[int] = field(default_factory=list)
    _last_emit: float | None = None

    def add(self, rnd: Round) -> None:
        self.prefill_s += rnd.t_prompt_s
        self.n_rounds += 1 if rnd.tokens else 0
        self.n_drafted += rnd.n_drafted
        self.n_accepted += rnd.n_accepted
        self.n_spec_rounds += 1 if rnd.n_drafted else 0
        self.t_draft_s += rnd.t_draft_s
        self.t_verify_s += rnd.t_verify_s
        self.n_side += rnd.n_side
        self.side_gain += rnd.side_gain if rnd.n_side else 0
        self.elapsed_s = rnd.elapsed_s
        if rnd.threads and rnd.threads not in self.thread_counts:
            self.thread_counts.append(rnd.threads)
        if rnd.drafted_by:
            by = self.accepted_by_drafter
            # (a round's forced tokens come first: the grammar's, then the drafter's)
            forced = 0 if rnd.drafted_by == GRAMMAR_SOURCE else min(rnd.n_forced, rnd.n_accepted)
            if forced:
                by[GRAMMAR_SOURCE] = by.get(GRAMMAR_SOURCE, 0) + forced
            by[rnd.drafted_by] = by.get(rnd.drafted_by, 0) + rnd.n_accepted - forced
        for i, accepted in enumerate(rnd.outcomes):
            if i == len(self.tried_by_position):
                self.tried_by_position.append(0)
                self.accepted_by_position.append(0)
            self.tried_by_position[i] += 1
            self.accepted_by_position[i] += accepted
        k = len(rnd.tokens)
        if k == 0:
            return
        if self._last_emit is None:
            self.ttft_s = rnd.elapsed_s
            self.gaps_s.extend([0.0] * (k - 1))
        else:
            self.gaps_s.append(rnd.elapsed_s - self._last_emit)
            self.gaps_s.extend([0.0] * (k - 1))
        self._last_emit = rnd.elapsed_s
        self.n_tokens += k

    def merge(self, other: GenerationStats) -> None:
        """Fold another generation in: totals over many prompts (ttft_s sums)."""
        for name in (
            "n_tokens", "n_rounds", "n_spec_rounds", "n_drafted", "n_accepted", "ttft_s",
            "prefill_s", "elapsed_s", "decode_s", "t_draft_s", "t_verify_s", "n_side",
            "side_gain",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.gaps_s.extend(other.gaps_s)
        self.thread_counts += [n for n in other.thread_counts if n not in self.thread_counts]
        for name, n in other.accepted_by_drafter.items():
            self.accepted_by_drafter[name] = self.accepted_by_drafter.get(name, 0) + n
        for mine, theirs in (
            (self.tried_by_position, other.tried_by_position),
            (self.accepted_by_position, other.accepted_by_position),
        ):
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, n in enumerate(theirs):
                mine[i] += n

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        """α_i measured: accepted / tried at draft position i, i = 1.."""
        return tuple(
            a / t for a, t in zip(self.accepted_by_position, self.tried_by_position, strict=True)
        )

    @property
    def round_overhead_s(self) -> float:
        """Wall time per round outside drafting and verifying: planning,
        committing, streaming, and the caller's own work between rounds."""
        if not self.n_rounds:
            return 0.0
        outside = self.generation_s - self.t_draft_s - self.t_verify_s
        return max(0.0, outside / self.n_rounds)

    @property
    def generation_s(self) -> float:
        return max(self.elapsed_s - self.prefill_s, 1e-9)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.generation_s if self.n_tokens else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.n_accepted / self.n_spec_rounds if self.n_spec_rounds else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.n_tokens / self.n_rounds if self.n_rounds else 0.0

    @property
    def overhead_share(self) -> float:
        return max(0.0, 1.0 - self.decode_s / self.elapsed_s) if self.elapsed_s else 0.0

    def latency_ms(self, percentile: float) -> float:
        return float(np.percentile(self.gaps_s, percentile) * 1000) if self.gaps_s else 0.0


NO_FIGURE: Final = "—"  # a figure that does not exist (no drafting, nothing measured)


def plain_tokens_per_s(step_s: float, stats: GenerationStats) -> float:
    """Plain decoding's rate for the reply of ``stats`` (module docstring): one
    plain step of ``step_s`` seconds plus the reply's cost per round outside
    drafting and verifying, since a plain reply pays that for every token."""
    return 1.0 / (step_s + stats.round_overhead_s) if step_s > 0 else 0.0


def reply_baseline(stats: GenerationStats, plain_tokens_per_s: float) -> float:
    """The baseline a reply shows (module docstring): its own rate while it
    has drafted nothing, else ``plain_tokens_per_s``, plain decoding as
    measured; 0.0 (no figure) for a reply without tokens."""
    if not stats.n_tokens:
        return 0.0
    return plain_tokens_per_s if stats.n_drafted else stats.tokens_per_s


def withheld_because(stats: GenerationStats, baseline_threads: int, baseline: float) -> str | None:
    """Why a reply that drafted may not claim a speedup although both rates
    exist: its baseline was not timed under its conditions (module
    docstring). The thread count follows the load, so a reply on other
    threads than its baseline, or on several, ran under another load."""
    counts = stats.thread_counts
    if not stats.n_drafted or not counts or not baseline_threads:
        return None
    if len(counts) > 1:
        steps = " → ".join(map(str, counts))
        return (
            f"the load changed during this reply (threads {steps}): plain decoding "
            "was not timed under the same conditions"
        )
    if counts[0] != baseline_threads:
        return (
            f"plain decoding was timed on {counted(baseline_threads, 'thread')}, this "
            f"reply ran on {counts[0]} as the load changed: the figure comes at its end"
        )
    if baseline <= 0:
        return f"plain decoding not timed on {counted(counts[0], 'thread')} yet: at the reply's end"
    return None


def speedup(tokens_per_s: float, baseline_tokens_per_s: float, n_drafted: int) -> float | None:
    """The speedup a reply may claim: its rate over the baseline, only when it
    drafted anything and both rates were measured (see the module docstring)."""
    if n_drafted <= 0 or tokens_per_s <= 0 or baseline_tokens_per_s <= 0:
        return None
    return tokens_per_s / baseline_tokens_per_s


def format_rate(tokens_per_s: float) -> str:
    """``"112.3 tok/s"``: one decimal everywhere, so every view prints the same text."""
    return f"{tokens_per_s:.1f} tok/s" if tokens_per_s > 0 else NO_FIGURE


def format_speedup(value: float | None) -> str:
    """``"1.07×"``, or "—" where there is no claim to make."""
    return f"{value:.2f}×" if value is not None else NO_FIGURE


def format_percent(fraction: float) -> str:
    return f"{fraction * 100:.0f}%"


def format_accepted(
    n_accepted: int, n_drafted: int, by_drafter: Mapping[str, int] | None = None
) -> str:
    """``"accepted 13/17 (76%)"``; ``"accepted 0/0"`` when nothing was drafted;
    with two or more drafters (``by_drafter``: accepted tokens by drafter
    name), what each supplied: ``"accepted 96/110 (87%): 70 lookup, 26 draft"``."""
    if not n_drafted:
        return f"accepted {n_accepted}/{n_drafted}"
    text = f"accepted {n_accepted}/{n_drafted} ({format_percent(n_accepted / n_drafted)})"
    return text + format_sources(by_drafter)


def format_sources(by_drafter: Mapping[str, int] | None) -> str:
    """``": 70 lookup, 26 draft"`` for two or more drafters, else ``""``."""
    if not by_drafter or len(by_drafter) < 2:
        return ""
    ranked = sorted(by_drafter.items(), key=lambda item: -item[1])
    return ": " + ", ".join(f"{n} {_SOURCE_TAGS.get(name, name)}" for name, n in ranked)


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything the stats panel shows, at one moment. Cheap to build per round.

    Every figure is defined in the module docstring: ``tokens_per_s`` is the
    reply's rate so far, ``speedup`` is ``tokens_per_s`` over
    ``baseline_tokens_per_s`` (None without drafting), and the rolling figures
    cover the last ``MetricsTracker.WINDOW`` rounds (acceptance: the last
    ``WINDOW`` rounds that drafted).
    """

    n_tokens: int
    n_drafted: int
    n_accepted: int
    n_rounds: int
    acceptance_rate: float
    acceptance_rate_rolling: float | None  # None before any round drafted
    mean_accepted: float
    acceptance_by_position: tuple[float, ...]  # α_i measured in this reply, i = 1..
    gamma: int
    gamma_reason: str
    tokens_per_s: float  # the reply's rate (prompt processing excluded)
    tokens_per_s_rolling: float  # over the last WINDOW rounds
    baseline_tokens_per_s: float
    speedup: float | None  # None: the reply drafted nothing, so it claims nothing
    ttft_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    draft_time_share: float
    elapsed_s: float
    tree: bool = False  # the engine drafts token trees
    side_nodes: int = 0  # side nodes the controller chose next to the chain of γ
    n_side: int = 0  # side nodes drafted in this reply
    side_gain: int = 0  # draft tokens accepted thanks to side nodes in this reply
    # Set when other programs kept the cores busy while the reply was timed
    # (gambit.engine.machine.busy): "other programs used 1.0 of 2 cores".
    busy: str | None = None
    # Accepted draft tokens by what drafted them, where a drafter has sources.
    accepted_by_drafter: tuple[tuple[str, int], ...] = ()
    # Why a reply that drafted claims no speedup although it has a rate
    # (``withheld_because``); None where it claims one, or drafted nothing.
    speedup_withheld: str | None = None
    # The CPU threads in use and why (``ThreadChoice.describe``); "" where not known.
    threads: str = ""

    @property
    def tokens_per_round(self) -> float:
        return self.n_tokens / self.n_rounds if self.n_rounds else 0.0


class MetricsTracker:
    """Folds one reply's rounds into ``MetricsSnapshot``s."""

    WINDOW = 16

    def __init__(self) -> None:
        self.stats = GenerationStats()
        # (tokens, elapsed_s) of the last rounds that produced tokens; one more
        # than WINDOW: the oldest only marks when the window's first round began.
        self._window: deque[tuple[int, float]] = deque(maxlen=self.WINDOW + 1)
        # (drafted, accepted) of the last WINDOW rounds that drafted.
        self._drafts: deque[tuple[int, int]] = deque(maxlen=self.WINDOW)

    def add(self, rnd: Round) -> None:
        self.stats.add(rnd)
        if rnd.tokens:
            self._window.append((len(rnd.tokens), rnd.elapsed_s))
        if rnd.n_drafted:
            self._drafts.append((rnd.n_drafted, rnd.n_accepted))

    def snapshot(
        self,
        baseline_tokens_per_s: float,
        gamma: int = 0,
        gamma_reason: str = "",
        *,
        tree: bool = False,
        side_nodes: int = 0,
        busy: str | None = None,
        baseline_threads: int = 0,
        threads: str = "",
    ) -> MetricsSnapshot:
        """``baseline_tokens_per_s``: plain decoding's rate as measured, for a
        reply that drafted (``reply_baseline``), on ``baseline_threads`` CPU
        threads (0: not known); ``gamma``/``gamma_reason``/``side_nodes``: the
        controller's current decision; ``busy``: how busy other programs kept
        the machine, if they did; ``threads``: the threads in use, and why."""
        s = self.stats
        withheld = withheld_because(s, baseline_threads, baseline_tokens_per_s)
        if withheld is not None:  # (no baseline under other conditions, in the chart either)
            baseline_tokens_per_s = 0.0
        baseline_tokens_per_s = reply_baseline(s, baseline_tokens_per_s)
        w = list(self._window)
        rolling_tps = s.tokens_per_s
        if len(w) >= 2:
            span = w[-1][1] - w[0][1]
            rolling_tps = sum(x[0] for x in w[1:]) / span if span > 0 else 0.0
        drafted = sum(d for d, _ in self._drafts)
        rolling_acc = sum(a for _, a in self._drafts) / drafted if drafted else None
        gaps = np.array(s.gaps_s) if s.gaps_s else np.zeros(1)
        p50, p95, p99 = np.percentile(gaps, [50, 95, 99]) * 1000
        draft_share = s.t_draft_s / s.elapsed_s if s.elapsed_s else 0.0
        return MetricsSnapshot(
            n_tokens=s.n_tokens,
            n_drafted=s.n_drafted,
            n_accepted=s.n_accepted,
            n_rounds=s.n_rounds,
            acceptance_rate=s.acceptance_rate,
            acceptance_rate_rolling=rolling_acc,
            mean_accepted=s.mean_accepted,
            acceptance_by_position=s.acceptance_by_position,
            gamma=gamma,
            gamma_reason=gamma_reason,
            tokens_per_s=s.tokens_per_s,
            tokens_per_s_rolling=rolling_tps,
            baseline_tokens_per_s=baseline_tokens_per_s,
            speedup=speedup(s.tokens_per_s, baseline_tokens_per_s, s.n_drafted),
            ttft_ms=s.ttft_s * 1000,
            p50_ms=float(p50),
            p95_ms=float(p95),
            p99_ms=float(p99),
            draft_time_share=draft_share,
            elapsed_s=s.elapsed_s,
            tree=tree,
            side_nodes=side_nodes,
            n_side=s.n_side,
            side_gain=s.side_gain,
            busy=busy,
            accepted_by_drafter=tuple(s.accepted_by_drafter.items()),
            speedup_withheld=withheld,
            threads=threads,
        )
