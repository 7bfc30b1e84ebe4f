"""The layer-skip search's measurements: candidates, their agreement with the
target and their cost, and the order in which skip sets are tried.

``layerskip.search_layer_skip`` drives it; this module holds how a skip set
is measured (``Evaluator``) and explored (``explore``), and how acceptance
and cost become an expected speedup (``expected_speedup``, by the
controller's own model).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from gambit.engine.estimates import CostModel, chain_speedup
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.text.chat import ChatPromptBuilder, Message
from gambit.errors import GambitError
from gambit.formats.layerskip_file import (
    Cancel,
    LayerSkipCancelledError,
    SourceModel,
    cancelled,
)
from gambit.fsutil import Progress
from gambit.words import counted

log = logging.getLogger(__name__)

_COST_REPEATS = 11  # pairs of single-token decodes (draft, target) per candidate
_FILLER = "The quick brown fox jumps over the lazy dog. " * 8
_PATIENCE = 3  # prefixes tried past the best one before the search stops growing it
_ACCEPTANCE_FLOOR = 0.02  # below this, skipping more blocks cannot help


@dataclass(frozen=True)
class LayerSkipCandidate:
    """One skip set the search measured."""

    skipped: tuple[int, ...]
    acceptance: float  # teacher-forced greedy agreement with the target
    draft_cost_ratio: float  # one draft step / one target step (fitted to all measurements)
    best_gamma: int  # the γ ≥ 1 with the best expected speedup
    expected_speedup: float  # at best_gamma, by the controller's cost model
    stage: str  # "single", "prefix" or "refine"
    measured_cost_ratio: float  # this candidate's own timing, against the target's copies


@dataclass
class Reference:
    """The target's greedy continuation of one calibration prompt."""

    prompt: list[int]
    continuation: list[int]


def prompt_tokens(rt: ModelRuntime, prompt: str, reserve: int) -> list[int]:
    if rt.chat_template():
        with contextlib.suppress(GambitError, ValueError, jinja2.TemplateError):
            return ChatPromptBuilder(rt).build([Message("user", prompt)], reserve).tokens
    return rt.tokenize(prompt, add_special=True, parse_special=False)


def greedy_continuation(
    rt: ModelRuntime,
    prompt: list[int],
    n_tokens: int,
    step: Callable[[int], None] | None = None,
) -> list[int]:
    """The target's greedy continuation of ``prompt``, up to ``n_tokens``;
    ``step(n)`` hears of each token (the n-th), and may raise to stop there:
    a token of a large model on a slow machine takes a second or more."""
    rt.clear()
    try:
        rt.decode(prompt)
        out: list[int] = []
        for _ in range(n_tokens):
            token = int(np.argmax(rt.logits(-1)))
            out.append(token)
            if step is not None:
                step(len(out))
            if rt.is_eog(token) or len(rt.kv_tokens) + 1 >= rt.n_ctx:
                break
            rt.decode([token])
    finally:
        rt.clear()
    return out


def references(
    rt: ModelRuntime,
    texts: Sequence[str],
    n_tokens: int,
    report: Progress,
    cancel: Cancel | None,
) -> list[Reference]:
    """The target's greedy continuation (``n_tokens``) of each calibration text,
    its prompt kept within half the context. Progress counts tokens, and a
    cancel stops it at the next one."""
    stage = "generating reference text"
    total = len(texts) * n_tokens
    refs: list[Reference] = []
    for i, text in enumerate(texts):
        report(stage, i * n_tokens, total)
        check_cancel(cancel)

        def step(n: int, before: int = i * n_tokens) -> None:
            report(stage, before + n, total)
            check_cancel(cancel)

        tokens = prompt_tokens(rt, text, n_tokens)[-(rt.n_ctx // 2) :]
        cont = greedy_continuation(rt, tokens, n_tokens, step)
        if cont:
            refs.append(Reference(tokens, cont))
    report(stage, total, total)
    check_cancel(cancel)
    return refs


def _agreement(
    rt: ModelRuntime, refs: Sequence[Reference], cancel: Cancel | None = None
) -> tuple[int, int]:
    """Positions where ``rt``'s argmax, given the target's text so far, is the
    target's next token: (agreeing, total)."""
    hits = total = 0
    for ref in refs:
        check_cancel(cancel)
        rt.clear()
        if len(ref.prompt) > 1:
            rt.decode(ref.prompt[:-1])
        batch = [ref.prompt[-1], *ref.continuation[:-1]]
        n = rt.decode(batch, all_logits=True)
        predicted = np.argmax(rt.logits_rows(n), axis=1)
        hits += int(np.count_nonzero(predicted == np.asarray(ref.continuation)))
        total += n
    rt.clear()
    return hits, total


def _step_ratio(
    target: ModelRuntime, draft: ModelRuntime, filler: list[int], cancel: Cancel | None = None
) -> float:
    """One draft step / one target step: single-token decodes on the same
    context, back to back in pairs (alternating which goes first), the median
    of the pairs' ratios: a pair shares the machine's state of the moment,
    and the median ignores the pairs that other work interrupted."""
    for rt in (target, draft):
        rt.clear()
        rt.decode(filler)
    ratios = []
    for i in range(_COST_REPEATS):
        check_cancel(cancel)
        seconds = {}
        for rt in (draft, target) if i % 2 else (target, draft):
            t0 = time.perf_counter()
            rt.decode([filler[i % len(filler)]])
            rt.logits(-1)  # waits for the backend (GPU builds)
            seconds[id(rt)] = time.perf_counter() - t0
            rt.truncate(len(filler))
        ratios.append(seconds[id(draft)] / seconds[id(target)])
    for rt in (target, draft):
        rt.clear()
    return float(np.median(ratios))


def expected_speedup(
    costs: CostModel, acceptance: float, draft_cost_ratio: float, gamma_max: int
) -> tuple[int, float]:
    """The best γ ≥ 1 and its expected speedup over plain decoding, by the
    controller's own model: acceptance α at every draft position, a draft step
    costing ``draft_cost_ratio`` target steps, verification as measured."""
    model = costs.copy()
    model.draft_ratio = draft_cost_ratio
    speedups = [chain_speedup(model, acceptance, g) for g in range(1, gamma_max + 1)]
    best = int(np.argmax(speedups))
    return best + 1, float(speedups[best])


class Evaluator:
    """Measures skip sets against a loaded target, one draft file at a time.

    Costs: a timing's noise is not only the moment's. Each load of a model
    file lands its weights in memory its own way (probably page-cache large
    folios or not; Linux 6.18 here): the same model, copied and loaded again,
    ran from 0.9x to 1.3x as long per step as the loaded target, steady
    within a load. The target's own load biases every candidate alike, so the
    search also times up to ``N_CONTROLS`` copies of the target that skip nothing,
    written and loaded like the candidates. Decoding streams the weights, so
    a draft's step costs about a - b·x, x the share of the blocks' bytes it
    leaves out: a line is fitted through all timings (the controls at x = 0)
    and a candidate's cost is read off it relative to x = 0, which takes out
    the common bias and averages the rest. Candidates are compared on that
    fitted cost; their own timing (over the controls' median) is recorded too.
    """

    N_CONTROLS = 3

    def __init__(
        self,
        source: SourceModel,
        target: ModelRuntime,
        refs: list[Reference],
        costs: CostModel,
        options: RuntimeOptions,
        folder: Path,
        gamma_max: int,
        cancel: Cancel | None,
    ) -> None:
        self.source, self.target, self.refs = source, target, refs
        self.costs, self.options, self.folder = costs, options, folder
        self.gamma_max, self.cancel = gamma_max, cancel
        self.filler = _filler(target)
        # skip set -> (acceptance, cost ratio against the controls, stage), in order
        self.measured: dict[tuple[int, ...], tuple[float, float, str]] = {}
        self.controls: list[float] = []  # copies skipping nothing, in target steps
        self.control = 1.0  # their median

    def measure_controls(self, n: int = N_CONTROLS) -> float:
        self.controls = [self._load_and_measure((), agreement=False)[1] for _ in range(n)]
        self.control = float(np.median(self.controls))
        log.info("layer skip: a copy of the target costs %.3f target steps", self.control)
        return self.control

    def _load_and_measure(self, key: tuple[int, ...], agreement: bool) -> tuple[float, float]:
        check_cancel(self.cancel)
        path = self.folder / "candidate.gguf"
        try:
            self.source.write(path, key, cancel=self.cancel, durable=False)
        except LayerSkipCancelledError:
            check_cancel(self.cancel)  # the search was stopped: say that, not a file's name
            raise
        try:
            with ModelRuntime(path, self.options) as draft:
                hits, total = _agreement(draft, self.refs, self.cancel) if agreement else (0, 0)
                ratio = _step_ratio(self.target, draft, self.filler, self.cancel)
        finally:
            path.unlink(missing_ok=True)
        return (hits / total if total else 0.0), ratio

    def __len__(self) -> int:
        return len(self.measured)

    def __call__(self, skip: Iterable[int], stage: str) -> LayerSkipCandidate:
        key = tuple(sorted(skip))
        if key not in self.measured:
            acceptance, ratio = self._load_and_measure(key, agreement=True)
            self.measured[key] = (acceptance, ratio, stage)
        cand = self.candidate(key)
        log.info(
            "layer skip %s: acceptance %.3f, cost %.3f (measured %.3f), γ %d, speedup %.3f",
            key, cand.acceptance, cand.draft_cost_ratio, cand.measured_cost_ratio,
            cand.best_gamma, cand.expected_speedup,
        )  # fmt: skip
        return cand

    def cost_ratio(self, skip: tuple[int, ...]) -> float:
        """The fitted cost of a draft step skipping ``skip``, in target steps:
        a line r = a - b·x through every timing (the controls at x = 0),
        read relative to its value at x = 0."""
        points = [(0.0, r) for r in self.controls]
        points += [(self.source.skipped_share(k), m[1]) for k, m in self.measured.items()]
        n = len(points)
        mean_x = sum(x for x, _ in points) / n
        mean_r = sum(r for _, r in points) / n
        sxx = sum((x - mean_x) ** 2 for x, _ in points)
        if sxx <= 0:
            return 1.0
        slope = sum((x - mean_x) * (r - mean_r) for x, r in points) / sxx
        b = max(0.0, -slope)  # leaving weights out never makes a step dearer
        a = mean_r + b * mean_x
        if a <= 0:
            return 1.0
        return min(1.0, max(0.01, 1.0 - b / a * self.source.skipped_share(skip)))

    def candidate(self, key: tuple[int, ...]) -> LayerSkipCandidate:
        acceptance, measured, stage = self.measured[key]
        ratio = self.cost_ratio(key)
        gamma, speedup = expected_speedup(self.costs, acceptance, ratio, self.gamma_max)
        own = measured / self.control
        return LayerSkipCandidate(key, acceptance, ratio, gamma, speedup, stage, own)

    def candidates(self) -> list[LayerSkipCandidate]:
        return [self.candidate(k) for k in self.measured]

    def best(self) -> LayerSkipCandidate:
        # ties: the fewer blocks skipped, then the earlier measured
        return max(self.candidates(), key=lambda c: (c.expected_speedup, -len(c.skipped)))


def _filler(rt: ModelRuntime, n: int = 32) -> list[int]:
    tokens = rt.tokenize(_FILLER, add_special=False)
    while len(tokens) < n:
        tokens = tokens + tokens
    return tokens[:n]


def check_cancel(cancel: Cancel | None) -> None:
    if cancelled(cancel):
        raise LayerSkipCancelledError("cancelled: the layer-skip search was stopped")


def stepping(report: Progress, stage: str, cancel: Cancel | None) -> Callable[[int, int], None]:
    """A step hook (``calibrate``'s): each step reported as ``stage``, and the
    search stopped at the first step after a cancel."""

    def step(done: int, total: int) -> None:
        report(stage, done, total)
        check_cancel(cancel)

    return step


def _spread(items: Sequence[int], n: int) -> list[int]:
    """``n`` of ``items``, evenly spaced."""
    if n >= len(items):
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    picks = {items[round(j * (len(items) - 1) / (n - 1))] for j in range(n)}
    return sorted(picks)


def explore(evaluate: Evaluator, n: int, budget: int, report: Progress) -> None:
    """Spend up to ``budget`` evaluations: single blocks, the least important
    k together, then greedy refinements of the best set."""

    def run(skip: Iterable[int], stage: str, label: str) -> LayerSkipCandidate | None:
        key = tuple(sorted(skip))
        if key not in evaluate.measured:
            if len(evaluate) >= budget:
                return None
            report(label, len(evaluate), budget)
        return evaluate(key, stage)

    interior = list(range(1, n - 1))  # the first and the last block always stay
    n_single = len(interior)
    if budget < n_single + 2:  # keep a third of a small budget for combinations
        n_single = max(min(budget, 2), budget - budget // 3)
    agreement: dict[int, float] = {}
    for b in _spread(interior, n_single):
        cand = run((b,), "single", f"measuring block {b} of {n}")
        if cand is not None:
            agreement[b] = cand.acceptance
    ranked = sorted(agreement, key=lambda b: (-agreement[b], b))  # least important first

    since_best = 0
    for k in range(2, len(ranked) + 1):
        cand = run(ranked[:k], "prefix", f"trying {counted(k, 'block')} skipped")
        if cand is None:
            break
        since_best = 0 if evaluate.best().skipped == cand.skipped else since_best + 1
        if since_best >= _PATIENCE or cand.acceptance < _ACCEPTANCE_FLOOR:
            break

    tried: set[tuple[int, ...]] = set()
    while len(evaluate) < budget:
        best = evaluate.best()
        if best.skipped in tried:
            break  # no refinement of it improved on it
        tried.add(best.skipped)
        chosen = set(best.skipped)
        rest = [b for b in ranked if b not in chosen]
        proposals = [chosen | {b} for b in rest[:2]]  # one block more
        weakest = [b for b in ranked if b in chosen][-1:]
        if weakest and rest:  # the least agreeing block swapped for the next
            proposals.append((chosen - set(weakest)) | {rest[0]})
        for skip in proposals:
            run(skip, "refine", f"refining: {counted(len(skip), 'block')} skipped")
