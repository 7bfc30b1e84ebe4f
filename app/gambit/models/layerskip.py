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

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gambit.engine.gamma.calibration import calibrate
from gambit.engine.gamma.policy import DEFAULT_GAMMA_MAX
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.errors import ModelFileError
from gambit.formats.gguf_file import check_model_file
from gambit.formats.layerskip_file import (
    Cancel,
    LayerSkipError,
    LayerSkipInfo,
    SourceModel,
    read_layer_skip_info,
    write_layer_skip_model,
)
from gambit.fsutil import Progress, scratch_dir, write_atomic
from gambit.models.layerskip_search import (
    Evaluator,
    LayerSkipCandidate,
    check_cancel,
    explore,
    references,
    stepping,
)
from gambit.models.library import ModelLibrary
from gambit.words import counted

__all__ = [
    "LayerSkipPlan",
    "LayerSkipResult",
    "draft_path_for",
    "ensure_layer_skip_draft",
    "search_layer_skip",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_EVALUATIONS = 40
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
# A draft step has to save at least this share of a target step to be worth
# drafting with: below it, even perfect acceptance gains next to nothing.
MIN_DRAFT_SAVING = 0.1
_SCRATCH_PREFIX = "gambit-layerskip-"
_SIDECAR_VERSION = 1


# ---------------------------------------------------------------------- types


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

    @classmethod
    def of_best(
        cls,
        source_name: str,
        source_blocks: int,
        best: LayerSkipCandidate,
        candidates: tuple[LayerSkipCandidate, ...],
        verify_cost: tuple[float, ...],
        control_cost_ratio: float,
        n_positions: int,
        search_seconds: float,
    ) -> LayerSkipPlan:
        """The plan that skips what ``best`` skips, with everything measured."""
        return cls(
            source_name=source_name,
            source_blocks=source_blocks,
            skipped=best.skipped,
            acceptance=best.acceptance,
            draft_cost_ratio=best.draft_cost_ratio,
            best_gamma=best.best_gamma,
            expected_speedup=best.expected_speedup,
            candidates=candidates,
            verify_cost=verify_cost,
            control_cost_ratio=control_cost_ratio,
            n_positions=n_positions,
            search_seconds=search_seconds,
        )

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
       ``Evaluator``).
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
            f"{src.name} has {counted(n, 'block')}: layer skipping needs at least 3 (the first "
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
        refs = references(target_rt, texts, n_tokens, report, cancel)
        report("measuring verification cost", 0, 1)
        step = stepping(report, "measuring verification cost", cancel)
        costs = calibrate(target_rt, None, gamma_max + 1, repeats=10, step=step)
        evaluate = Evaluator(source, target_rt, refs, costs, opts, Path(tmp), gamma_max, cancel)
        report("measuring the target's own copy", 0, 1)
        control = evaluate.measure_controls(min(evaluate.N_CONTROLS, 1 + max_evaluations // 16))
        report("measuring the target's own copy", 1, 1)
        explore(evaluate, n, max_evaluations, report)
        best = evaluate.best()
        candidates = tuple(evaluate.candidates())
        report("done", len(candidates), len(candidates))

    verify = tuple(costs.verify_cost(k) / costs.verify_cost(1) for k in range(1, costs.k_max + 1))
    n_positions = sum(len(r.continuation) for r in refs)
    seconds = time.perf_counter() - t_start
    plan = LayerSkipPlan.of_best(
        src.name, n, best, candidates, verify, control, n_positions, seconds
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
    check_cancel(cancel)
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
