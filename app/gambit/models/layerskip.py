"""Self-speculation by layer skipping: which blocks of the target to leave out.

The draft is the target minus some blocks (``layerskip_file``). Which blocks
is measured, not guessed (``search_layer_skip``): teacher-forced greedy
agreement with the target on calibration prompts gives a candidate's
acceptance α, single-token decodes its cost against the target's, and the
controller's own cost model turns both into an expected speedup. The result
is cached per target file in the models folder (``ensure_layer_skip_draft``).

Small models have no spare depth: on SmolLM2-135M acceptance collapses as
blocks go, the best expected speedup stays below 1, and the adaptive
controller switches speculation off. That is reported, not hidden.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from gambit.engine.chat import ChatPromptBuilder, Message
from gambit.engine.controller import CostModel, GammaController, calibrate
from gambit.engine.runtime import ModelRuntime, RuntimeOptions
from gambit.errors import GambitError, ModelFileError
from gambit.formats.gguf_file import check_model_file
from gambit.formats.layerskip_file import (
    Cancel,
    LayerSkipCancelledError,
    LayerSkipError,
    LayerSkipInfo,
    SourceModel,
    cancelled,
    read_layer_skip_info,
    write_layer_skip_model,
)
from gambit.fsutil import Progress, scratch_dir
from gambit.models.library import ModelLibrary
from gambit.storage.files import write_atomic

__all__ = [
    "LayerSkipCandidate",
    "LayerSkipPlan",
    "LayerSkipResult",
    "draft_path_for",
    "ensure_layer_skip_draft",
    "expected_speedup",
    "search_layer_skip",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_EVALUATIONS = 40
DEFAULT_GAMMA_MAX = 8  # as EngineConfig.gamma_max
CALIBRATION_TOKENS = 48  # of the target's own greedy continuation, per prompt
# User messages (chat models) or plain text to continue (base models): everyday
# chat, a how-to, code and a rewrite, as in resources/prompts.
CALIBRATION_PROMPTS: tuple[str, ...] = (
    "Explain in simple words what photosynthesis is.",
    "Give me three practical tips for sleeping better at night.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Rewrite in the past tense: The cat sits on the mat and watches the birds. "
    "It waits for the sun to go down.",
)
_COST_REPEATS = 11  # pairs of single-token decodes (draft, target) per candidate
_FILLER = "The quick brown fox jumps over the lazy dog. " * 8
_PATIENCE = 3  # prefixes tried past the best one before the search stops growing it
_ACCEPTANCE_FLOOR = 0.02  # below this, skipping more blocks cannot help
# A draft step has to save at least this share of a target step to be worth
# drafting with: below it, even perfect acceptance gains next to nothing.
MIN_DRAFT_SAVING = 0.1
_SCRATCH_PREFIX = "gambit-layerskip-"
_SIDECAR_VERSION = 1


# ---------------------------------------------------------------------- types


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


@dataclass(frozen=True)
class LayerSkipPlan:
    """The outcome of a search: the chosen skip set and everything measured."""

    source_name: str
    source_blocks: int
    skipped: tuple[int, ...]
    acceptance: float
    draft_cost_ratio: float
    best_gamma: int
    expected_speedup: float
    candidates: tuple[LayerSkipCandidate, ...]
    verify_cost: tuple[float, ...]  # t_target(k) / t_target(1) for k = 1..k_max
    control_cost_ratio: float  # copies of the target skipping nothing / the loaded target
    n_positions: int  # teacher-forced positions behind each acceptance
    search_seconds: float

    @property
    def kept(self) -> int:
        return self.source_blocks - len(self.skipped)

    @property
    def pays(self) -> bool:
        return self.expected_speedup > 1.0

    def refusal(self) -> str | None:
        """Why drafting with this plan would not speed anything up, in plain
        words; None when it pays."""
        name, k, n = self.source_name, len(self.skipped), self.source_blocks
        if not self.skipped:
            return f"Skipping layers cannot speed up {name}: no block of it can be left out."
        if self.draft_cost_ratio > 1.0 - MIN_DRAFT_SAVING:
            return (
                f"Skipping layers cannot speed up {name}: the best choice found leaves out "
                f"only {k} of its {n} blocks, so a draft step would still cost "
                f"{self.draft_cost_ratio:.0%} of a full step - too little saved to gain "
                "anything."
            )
        if not self.pays:
            return (
                f"Skipping layers cannot speed up {name} on this machine: the best choice "
                f"found leaves out {k} of its {n} blocks, but then it agrees with the full "
                f"model on only {self.acceptance:.0%} of the words, and replies would come "
                f"at about {self.expected_speedup:.2f}x the speed of plain decoding - "
                "slower, not faster."
            )
        return None

    @property
    def info(self) -> LayerSkipInfo:
        return LayerSkipInfo(self.skipped, self.source_blocks, self.source_name)

    def summary(self) -> str:
        text = (
            f"{self.info.describe()} ({self.kept} kept): acceptance {self.acceptance:.1%}, "
            f"draft step {self.draft_cost_ratio:.2f}x the target's, best γ {self.best_gamma}, "
            f"expected speedup {self.expected_speedup:.2f}x"
        )
        if not self.pays:
            text += (
                " - below 1: drafting with it is slower than plain decoding on this "
                "machine, and the adaptive controller will switch speculation off"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LayerSkipPlan:
        values = dict(data)
        values["skipped"] = tuple(int(i) for i in values["skipped"])
        values["verify_cost"] = tuple(float(x) for x in values["verify_cost"])
        values["candidates"] = tuple(
            LayerSkipCandidate(**{**c, "skipped": tuple(int(i) for i in c["skipped"])})
            for c in values["candidates"]
        )
        return cls(**values)


@dataclass(frozen=True)
class LayerSkipResult:
    path: Path
    plan: LayerSkipPlan
    info: LayerSkipInfo
    from_cache: bool


# ---------------------------------------------------------------------- search


@dataclass
class _Reference:
    """The target's greedy continuation of one calibration prompt."""

    prompt: list[int]
    continuation: list[int]


def _prompt_tokens(rt: ModelRuntime, prompt: str, reserve: int) -> list[int]:
    if rt.chat_template():
        with contextlib.suppress(GambitError, ValueError, jinja2.TemplateError):
            return ChatPromptBuilder(rt).build([Message("user", prompt)], reserve).tokens
    return rt.tokenize(prompt, add_special=True, parse_special=False)


def _greedy_continuation(rt: ModelRuntime, prompt: list[int], n_tokens: int) -> list[int]:
    rt.clear()
    rt.decode(prompt)
    out: list[int] = []
    for _ in range(n_tokens):
        token = int(np.argmax(rt.logits(-1)))
        out.append(token)
        if rt.is_eog(token) or len(rt.kv_tokens) + 1 >= rt.n_ctx:
            break
        rt.decode([token])
    rt.clear()
    return out


def _agreement(
    rt: ModelRuntime, refs: Sequence[_Reference], cancel: Cancel | None = None
) -> tuple[int, int]:
    """Positions where ``rt``'s argmax, given the target's text so far, is the
    target's next token: (agreeing, total)."""
    hits = total = 0
    for ref in refs:
        _check_cancel(cancel)
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
        _check_cancel(cancel)
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
    controller = GammaController(model, gamma_max=gamma_max, prior_alpha=acceptance)
    speedups = [controller.expected_speedup(g) for g in range(1, gamma_max + 1)]
    best = int(np.argmax(speedups))
    return best + 1, float(speedups[best])


class _Evaluator:
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
        refs: list[_Reference],
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
        _check_cancel(self.cancel)
        path = self.folder / "candidate.gguf"
        try:
            self.source.write(path, key, cancel=self.cancel, durable=False)
        except LayerSkipCancelledError:
            _check_cancel(self.cancel)  # the search was stopped: say that, not a file's name
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


def _check_cancel(cancel: Cancel | None) -> None:
    if cancelled(cancel):
        raise LayerSkipCancelledError("cancelled: the layer-skip search was stopped")


def _spread(items: Sequence[int], n: int) -> list[int]:
    """``n`` of ``items``, evenly spaced."""
    if n >= len(items):
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    picks = {items[round(j * (len(items) - 1) / (n - 1))] for j in range(n)}
    return sorted(picks)


def _explore(evaluate: _Evaluator, n: int, budget: int, report: Progress) -> None:
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
        cand = run(ranked[:k], "prefix", f"trying {k} blocks skipped")
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
            run(skip, "refine", f"refining: {len(skip)} blocks skipped")


def search_layer_skip(
    target: str | os.PathLike[str],
    *,
    prompts: Sequence[str] | None = None,
    options: RuntimeOptions | None = None,
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    workdir: str | os.PathLike[str] | None = None,
    n_tokens: int = CALIBRATION_TOKENS,
    gamma_max: int = DEFAULT_GAMMA_MAX,
) -> LayerSkipPlan:
    """Choose the blocks of ``target`` to skip for the best expected speedup.

    1. The target's greedy continuation (``n_tokens``) of each calibration
       prompt, its verification cost curve (``calibrate``), and the step time
       of copies of it that skip nothing (the baseline of draft costs, see
       ``_Evaluator``).
    2. Every single-block removal (never the first or the last block; an
       evenly spaced subset when ``max_evaluations`` is too small for all),
       ranked by agreement with the target.
    3. The k least important blocks skipped together, for k = 2, 3, ... until
       the expected speedup has not improved for a few k, acceptance
       collapses or the budget is spent; then, budget permitting, greedy
       refinements of the best set (one block more, or one swapped).

    Each candidate is written as a GGUF in a temporary folder (under
    ``workdir``, the system's by default), loaded, measured and deleted; the
    folder is named by this process and goes when the search ends, however it
    ends; one that a killed search left is removed by the next search. The
    plan holds the best
    candidate by expected speedup - below 1 when nothing pays, which the
    adaptive controller then acts on - and every candidate measured.
    """
    if max_evaluations < 1:
        raise ValueError("max_evaluations must be 1 or more")
    t_start = time.perf_counter()
    src = Path(target).expanduser()
    source = SourceModel(src)
    n = source.n_blocks
    if n < 3:
        raise LayerSkipError(
            f"{src.name} has {n} block(s): layer skipping needs at least 3 (the first "
            "and the last are always kept)"
        )
    texts = list(prompts) if prompts is not None else list(CALIBRATION_PROMPTS)
    if not texts:
        raise ValueError("at least one calibration prompt is needed")
    base = options or RuntimeOptions()
    opts = replace(base, n_ctx=1024, n_batch=1024)
    report = progress or (lambda _s, _d, _t: None)

    with (
        ModelRuntime(src, opts) as target_rt,
        scratch_dir(_SCRATCH_PREFIX, workdir) as tmp,
    ):
        refs: list[_Reference] = []
        for i, text in enumerate(texts):
            report("generating reference text", i, len(texts))
            _check_cancel(cancel)
            tokens = _prompt_tokens(target_rt, text, n_tokens)[-(opts.n_ctx // 2) :]
            cont = _greedy_continuation(target_rt, tokens, n_tokens)
            if cont:
                refs.append(_Reference(tokens, cont))
        report("generating reference text", len(texts), len(texts))
        _check_cancel(cancel)
        report("measuring verification cost", 0, 1)
        costs = calibrate(target_rt, None, gamma_max + 1, repeats=10)
        report("measuring verification cost", 1, 1)
        evaluate = _Evaluator(source, target_rt, refs, costs, opts, Path(tmp), gamma_max, cancel)
        report("measuring the target's own copy", 0, 1)
        control = evaluate.measure_controls(min(evaluate.N_CONTROLS, 1 + max_evaluations // 16))
        report("measuring the target's own copy", 1, 1)
        _explore(evaluate, n, max_evaluations, report)
        best = evaluate.best()
        candidates = tuple(evaluate.candidates())
        report("done", len(candidates), len(candidates))

    n_positions = sum(len(r.continuation) for r in refs)
    verify = tuple(costs.verify_cost(k) / costs.verify_cost(1) for k in range(1, costs.k_max + 1))
    plan = LayerSkipPlan(
        source_name=src.name,
        source_blocks=n,
        skipped=best.skipped,
        acceptance=best.acceptance,
        draft_cost_ratio=best.draft_cost_ratio,
        best_gamma=best.best_gamma,
        expected_speedup=best.expected_speedup,
        candidates=candidates,
        verify_cost=verify,
        control_cost_ratio=control,
        n_positions=n_positions,
        search_seconds=time.perf_counter() - t_start,
    )
    log.info("layer skip search for %s: %s", src.name, plan.summary())
    return plan


# ---------------------------------------------------------------------- cache


def _identity(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stem(path: Path) -> str:
    name = path.name
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


def _sidecar(draft: Path) -> Path:
    return draft.with_name(_stem(draft) + ".json")


def _read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def draft_path_for(target: str | os.PathLike[str], models_dir: Path) -> Path:
    """Where the layer-skip draft of ``target`` lives in ``models_dir``:
    ``NAME.layerskip.gguf``, or with a short hash of the target's real path
    when a draft of another file by the same name is there already."""
    src = Path(target).expanduser()
    real = os.path.realpath(src)
    digest = hashlib.sha256(real.encode()).hexdigest()[:8]
    names = [f"{_stem(src)}.layerskip.gguf", f"{_stem(src)}.layerskip-{digest}.gguf"]
    for name in names:
        draft = models_dir / name
        meta = _read_sidecar(_sidecar(draft))
        if meta is not None:
            if meta.get("target", {}).get("path") == real:
                return draft
        elif not draft.exists():
            return draft
    return models_dir / names[-1]


def _cached(draft: Path, target: Path) -> LayerSkipResult | None:
    """The draft recorded next to ``draft``, if it was made from ``target`` as
    it is now and has not changed since."""
    meta = _read_sidecar(_sidecar(draft))
    if meta is None or meta.get("version") != _SIDECAR_VERSION:
        return None
    try:
        if meta["target"] != _identity(target) or meta["draft"] != _identity(draft):
            return None
        plan = LayerSkipPlan.from_json(meta["plan"])
        info = read_layer_skip_info(draft)
    except (OSError, KeyError, TypeError, ValueError, ModelFileError) as exc:
        log.info("layer-skip cache of %s not usable: %s", target.name, exc)
        return None
    if info is None or info.skipped != plan.skipped:
        return None
    return LayerSkipResult(draft, plan, info, from_cache=True)


def ensure_layer_skip_draft(
    target: str | os.PathLike[str],
    *,
    library: ModelLibrary | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    options: RuntimeOptions | None = None,
    force: bool = False,
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
    prompts: Sequence[str] | None = None,
    n_tokens: int = CALIBRATION_TOKENS,
) -> LayerSkipResult:
    """The layer-skip draft of ``target``: from the cache when one was made
    from this very file (real path, size and modification time), otherwise
    searched for (``search_layer_skip``; ``force`` always searches), written
    into the library's models folder with a JSON record of its plan next to
    it, and registered as a derived draft of the target.

    With ``cancel`` set the search or the writing stops, no partial file is
    left, and ``LayerSkipCancelledError`` is raised.
    """
    src = Path(target).expanduser()
    check_model_file(src)
    library = library if library is not None else ModelLibrary()
    draft = draft_path_for(src, library.models_dir)
    if not force and (hit := _cached(draft, src)) is not None:
        library.register_draft(src, draft, origin="derived")
        return hit
    before = _identity(src)
    plan = search_layer_skip(
        src,
        prompts=prompts,
        options=options,
        max_evaluations=max_evaluations,
        progress=progress,
        cancel=cancel,
        n_tokens=n_tokens,
    )
    _check_cancel(cancel)
    if _identity(src) != before:
        raise LayerSkipError(f"{src.name} changed during the layer-skip search; try again")
    sidecar = _sidecar(draft)
    sidecar.unlink(missing_ok=True)  # a stale record must not describe the new file
    write_layer_skip_model(src, draft, plan.skipped, progress, cancel=cancel)
    record = {
        "version": _SIDECAR_VERSION,
        "target": before,
        "draft": _identity(draft),
        "plan": plan.to_json(),
    }
    write_atomic(sidecar, json.dumps(record, indent=1))
    library.register_draft(src, draft, origin="derived")
    info = read_layer_skip_info(draft)
    assert info is not None
    return LayerSkipResult(draft, plan, info, from_cache=False)
