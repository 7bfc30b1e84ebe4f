"""Measure on my chats: does speculation pay on the user's own conversations?

The design note's first rule is to measure acceptance on your own data before
trusting a speedup. This replays the user's turns (each with the conversation
before it) on the models the app has loaded: target-only and under each
configuration (a drafter and a policy), the same seed and a cold cache for
every replay, and the order of the configurations rotated from turn to turn,
so that a slow spell of the machine hits all of them alike. Speedups are
ratios within the one run, as ``gambit-cli bench`` measures them, and the
report uses bench's JSON schema (extended, see docs/measure.md).

Replies are greedy (temperature 0), so that each speculative reply can be
compared token for token with the target's own: the greedy divergence rate.

Figures know their noise. Target-only runs twice on every turn, apart in the
rotation; how far the two runs' rates differ is the noise floor that a gain
must clear before it is recommended ("not enough evidence yet" otherwise),
and every replay notes whether other programs kept the cores busy meanwhile
(``gambit.engine.machine.busy``). A configuration that had no draft token accepted
cannot have gained anything: it claims no speedup (None, shown "—").
Cancel stops at the next round (and a long prompt midway, through llama.cpp's
abort callback); nothing here writes anywhere.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gambit.bench.costs import CALIBRATION_CONTEXT, cost_summary
from gambit.bench.measure_report import baseline_noise, recommend, regime_sentence, turn_kind
from gambit.bench.runner import TARGET_ONLY, ModeTotals
from gambit.engine.drafters.registry import DRAFTERS, DRAFTING, DrafterKind, spec
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.metrics import GenerationStats, speedup
from gambit.engine.machine.backend import detect_backend
from gambit.engine.machine.busy import LoadMeter, LoadReading
from gambit.engine.machine.kernels import cpu_id
from gambit.engine.machine.threads import default_threads
from gambit.engine.session import Engine, Replay
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig, StopReason
from gambit.engine.text.template_sandbox import RenderCancelledError
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import ContextOverflowError, GambitError
from gambit.storage.prompts.history_turns import HistoryTurn

SCHEMA = "gambit-bench/2"  # bench's report, extended (docs/measure.md)
DEFAULT_MAX_TOKENS = 96
DEFAULT_SEED = 1234
DEFAULT_POLICIES = ("adaptive", "fixed=4")
POLICY_CHOICES = ("adaptive", "fixed=2", "fixed=4", "fixed=8")
# The drafters' names in sentences ("prompt lookup"), from the registry.
DRAFTER_LABELS: dict[str, str] = {kind: DRAFTERS[kind].short for kind in DRAFTING}


@dataclass(frozen=True)
class MeasureConfig:
    """One configuration to compare with target-only: a drafter, a policy
    ("adaptive" or "fixed=N") and whether it drafts token trees."""

    drafter: DrafterKind
    policy: str = "adaptive"
    tree: bool = False
    # A draft model of the library other than the loaded one (drafter
    # "draft"): which draft pays on these chats (``Engine.replay(draft=...)``).
    draft: str | None = None

    @property
    def gamma(self) -> int | None:
        return int(self.policy.removeprefix("fixed=")) if self.policy != "adaptive" else None

    @property
    def name(self) -> str:
        """The mode's key in the report: "lookup adaptive", "tree draft fixed=4",
        "draft adaptive: D.gguf" (a candidate draft)."""
        name = f"{'tree ' if self.tree else ''}{self.drafter} {self.policy}"
        return f"{name}: {Path(self.draft).name}" if self.draft else name

    @property
    def label(self) -> str:
        """In words: "prompt lookup, adaptive", "draft model tree, γ=4",
        "draft D.gguf, adaptive"."""
        drafter = DRAFTER_LABELS.get(self.drafter, self.drafter) + (" tree" if self.tree else "")
        if self.draft:
            drafter = f"draft {Path(self.draft).name}"
        return f"{drafter}, {'adaptive' if self.gamma is None else f'γ={self.gamma}'}"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "drafter": self.drafter,
            "policy": self.policy,
            "gamma": self.gamma,
            "tree": self.tree,
            "draft": self.draft,
        }


# Target-only's second run of each turn, apart in the rotation: its difference
# from the first is the noise a gain must clear (folded into target-only's figures).
TARGET_ONLY_AGAIN = "target-only again"
# What target-only is, in the report's list of modes (the baseline: never drafts).
TARGET_ONLY_MODE: dict[str, Any] = {
    "name": TARGET_ONLY, "label": "target only", "drafter": None,
    "policy": "off", "gamma": None, "tree": False,
}  # fmt: skip


@dataclass(frozen=True)
class MeasureProgress:
    done: int  # replays finished
    total: int
    elapsed_s: float
    eta_s: float | None  # None until a replay has been timed
    line: str


Progress = Callable[[MeasureProgress], None]


class MeasurementCancelledError(GambitError):
    def __init__(self, done: int, total: int) -> None:
        super().__init__(
            f"Measurement cancelled after {done} of {total} replays; nothing was saved."
        )
        self.done = done
        self.total = total


def available_drafters(engine: Engine) -> tuple[DrafterKind, ...]:
    """The drafters the loaded models allow: those that need no model (prompt
    lookup) always, and the draft model or layer-skip draft when one is loaded
    (with draft model + lookup loaded, the draft model alone too)."""
    kinds: list[DrafterKind] = [k for k in DRAFTING if not DRAFTERS[k].loads_model]
    if spec(engine.config.drafter).loads_model and engine.draft_runtime is not None:
        if "draft" in spec(engine.config.drafter).combines:
            kinds.append("draft")
        kinds.append(engine.config.drafter)
    return tuple(kinds)


def trees_available(engine: Engine) -> bool:
    """Trees need a target loaded with one KV sequence per leaf (Tree drafts on)."""
    return engine.target.n_seq_max > 1


def plan(
    engine: Engine,
    drafters: Sequence[str],
    policies: Sequence[str],
    trees: bool,
    drafts: Sequence[str] = (),
) -> tuple[list[MeasureConfig], list[str]]:
    """The configurations to run for the chosen drafters and policies, and a
    note for each choice the loaded models cannot serve. Trees run under the
    adaptive policy, which chooses their side nodes. ``drafts``: draft models
    of the library to compare besides the loaded drafters, each under the
    adaptive policy (loaded next to the target for the measurement)."""
    notes: list[str] = []
    usable = available_drafters(engine)
    gamma_max = engine.config.gamma_max
    kept_policies = []
    for p in dict.fromkeys(policies):
        gamma = p.removeprefix("fixed=")
        if p == "adaptive" or (gamma.isdigit() and 1 <= int(gamma) <= gamma_max):
            kept_policies.append(p)
        else:
            notes.append(f"policy {p} left out: fixed γ must be 1 to max γ ({gamma_max})")
    if trees and not trees_available(engine):
        notes.append(
            "trees left out: switch on Settings → Speculation → Tree drafts to compare them"
        )
        trees = False
    configs: list[MeasureConfig] = []
    for d in dict.fromkeys(drafters):
        if d not in usable:
            label = DRAFTER_LABELS.get(d, d)
            notes.append(
                f"{label} left out: it is not loaded "
                "(choose it in Settings → Models → Drafter first)"
            )
            continue
        kind: DrafterKind = d
        configs += [MeasureConfig(kind, p) for p in kept_policies]
        if trees:
            configs.append(MeasureConfig(kind, "adaptive", tree=True))
    for path in dict.fromkeys(drafts):
        if (
            engine.config.draft is not None
            and Path(path).resolve() == engine.config.draft.resolve()
        ):
            if "draft" not in drafters:  # (the loaded draft: as the draft model above)
                configs.append(MeasureConfig("draft", "adaptive"))
            continue
        configs.append(MeasureConfig("draft", "adaptive", draft=str(path)))
    return configs, notes


class _CancelledError(Exception):
    pass


class _Replayer:
    """Runs replays on the engine's loaded models, each with its own decoder."""

    def __init__(self, engine: Engine, cancel: threading.Event | None) -> None:
        self.engine = engine
        self.cancel = cancel
        cfg = engine.config
        # Enough batch sizes for every chain and tree, and for t(5)/t(9).
        self.k_max = max(cfg.gamma_max, engine.node_max, 8) + 1

    def calibrate(self, draft: str | None = None) -> CostModel:
        """The pair's costs now: with the loaded draft, or the candidate ``draft``."""
        context = min(CALIBRATION_CONTEXT, self.engine.target.n_ctx // 2 - self.k_max)
        path = Path(draft) if draft else None
        return self.engine.calibrate(self.k_max, context=max(context, 16), draft=path)

    def decoders(self, configs: Sequence[MeasureConfig], costs: CostModel) -> dict[str, Replay]:
        """A decoder per mode, target-only's twice (one decoder); a candidate
        draft's with its own costs with this target."""
        plain = self.decoder(None, costs)
        decoders = {TARGET_ONLY: plain, TARGET_ONLY_AGAIN: plain}
        for c in configs:
            decoders[c.name] = self.decoder(c, self.calibrate(c.draft) if c.draft else costs)
        return decoders

    def decoder(self, config: MeasureConfig | None, costs: CostModel) -> Replay:
        if config is None:
            return self.engine.replay(None, costs)
        draft = Path(config.draft) if config.draft else None
        return self.engine.replay(
            config.drafter, costs, gamma=config.gamma, tree=config.tree, draft=draft
        )

    def prompt(self, messages: Sequence[Message], reserve: int) -> list[int]:
        builder = self.engine.chat_builder
        builder.forget()  # a cold prompt for every turn: no reuse from another turn
        try:
            return builder.build(messages, reserve=reserve, cancel=self.cancel).tokens
        except RenderCancelledError:
            raise _CancelledError from None

    def run(
        self, decoder: Replay, prompt: list[int], config: GenerationConfig
    ) -> tuple[GenerationStats, list[int], LoadReading]:
        """One replay from a cold cache; its stats, reply tokens, and how busy
        other programs kept the machine meanwhile."""
        if self.cancel is not None and self.cancel.is_set():
            raise _CancelledError
        engine = self.engine
        engine.target.clear()
        if engine.draft_runtime is not None:
            engine.draft_runtime.clear()
        d0 = engine.decode_seconds
        stats = GenerationStats()
        tokens: list[int] = []
        load = LoadMeter()
        for rnd in decoder.generate(prompt, config, self.cancel):
            if rnd.stop is StopReason.CANCELLED:
                raise _CancelledError
            stats.add(rnd)
            tokens.extend(rnd.tokens)
        stats.decode_s = engine.decode_seconds - d0
        return stats, tokens, load.read()

    def reset(self) -> None:
        """Leave the engine as a fresh load would: empty caches, no remembered chat."""
        engine = self.engine
        engine.target.clear()
        if engine.draft_runtime is not None:
            engine.draft_runtime.clear()
        engine.chat_builder.forget()


@dataclass
class _Tally:
    """Totals of one run, per suite (turn kind and ALL) and per conversation."""

    suites: dict[str, dict[str, ModeTotals]] = dataclasses.field(
        default_factory=lambda: defaultdict(lambda: defaultdict(ModeTotals))
    )
    conversations: dict[int, dict[str, ModeTotals]] = dataclasses.field(
        default_factory=lambda: defaultdict(lambda: defaultdict(ModeTotals))
    )
    kinds: dict[int, Counter[str]] = dataclasses.field(default_factory=lambda: defaultdict(Counter))
    compared: Counter[str] = dataclasses.field(default_factory=Counter)
    diverged: Counter[str] = dataclasses.field(default_factory=Counter)
    turns: int = 0
    skipped: int = 0
    # Per turn, the two target-only runs' (tokens, generation seconds).
    baselines: list[tuple[tuple[int, float], tuple[int, float]]] = dataclasses.field(
        default_factory=list
    )
    replays: int = 0
    busy_replays: int = 0  # replays timed while other programs kept the cores busy
    other_cores: float = 0.0  # summed over the replays: their mean is the load

    def add_replay(
        self, conversation: int, kind: str, mode: str, stats: GenerationStats, load: LoadReading
    ) -> None:
        """One replay's figures, in its kind's suite, ALL and its conversation."""
        key = TARGET_ONLY if mode == TARGET_ONLY_AGAIN else mode  # both make the baseline
        for by_mode in (self.suites[kind], self.suites["ALL"]):
            by_mode[key].add(stats)
        self.conversations[conversation][key].add(stats)
        self.replays += 1
        self.busy_replays += load.busy
        self.other_cores += load.other_cores

    def end_turn(
        self,
        names: Sequence[str],
        outputs: dict[str, list[int]],
        plain: GenerationStats,
        again: GenerationStats,
    ) -> None:
        """A turn replayed under every mode: its greedy divergences and noise."""
        self.baselines.append(
            ((plain.n_tokens, plain.generation_s), (again.n_tokens, again.generation_s))
        )
        for mode in names:
            self.compared[mode] += 1
            self.diverged[mode] += outputs[mode] != outputs[TARGET_ONLY]


def run_measurement(
    engine: Engine,
    turns: Sequence[HistoryTurn],
    configs: Sequence[MeasureConfig],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = DEFAULT_SEED,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """Replay ``turns`` target-only and under each of ``configs``; the report.

    Raises ``MeasurementCancelledError`` when ``cancel`` is set (within a
    round), ``GambitError`` when there is nothing to replay.
    """
    if not turns:
        raise GambitError("There are no user turns to replay in the chosen conversations.")
    sampling = SamplingParams(temperature=0.0, seed=seed)
    config = GenerationConfig(max_tokens=max_tokens, sampling=sampling)
    replayer = _Replayer(engine, cancel)
    names = [c.name for c in configs]
    modes = _rotation(names)
    total = len(turns) * replays_per_turn(len(configs))
    report_progress = progress or (lambda p: None)
    started = time.time()
    tally = _Tally()
    done = 0
    # While replaying, the heap the app already holds (Qt, numpy, the models'
    # metadata) is kept out of the cyclic collector: a full collection then
    # scans only what the replays made, instead of holding the GIL (and a
    # window waiting for it) for tens of milliseconds: 30 ms measured for a
    # window's heap here. Reference counting frees memory as always.
    gc.freeze()
    try:
        report_progress(MeasureProgress(0, total, 0.0, None, "Timing this machine…"))
        costs = replayer.calibrate()
        decoders = replayer.decoders(configs, costs)
        _warm_up(replayer, costs, configs, sampling)
        t0 = time.perf_counter()
        for i, turn in enumerate(turns):
            try:
                prompt = replayer.prompt(turn.messages, max_tokens)
            except ContextOverflowError:
                tally.skipped += 1  # a message longer than the context: never replied to
                done += len(modes)
                continue
            kind = turn_kind(turn.text)
            tally.turns += 1
            tally.kinds[turn.conversation_id][kind] += 1
            outputs: dict[str, list[int]] = {}
            plain: dict[str, GenerationStats] = {}
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
                stats, outputs[mode], load = replayer.run(decoders[mode], prompt, config)
                tally.add_replay(turn.conversation_id, kind, mode, stats, load)
                if mode in (TARGET_ONLY, TARGET_ONLY_AGAIN):
                    plain[mode] = stats
                done += 1
                elapsed = time.perf_counter() - t0
                report_progress(
                    MeasureProgress(
                        done, total, elapsed, elapsed / done * (total - done),
                        f"Turn {i + 1} of {len(turns)} ({kind}): {_mode_label(mode, configs)}",
                    )
                )  # fmt: skip
            tally.end_turn(names, outputs, plain[TARGET_ONLY], plain[TARGET_ONLY_AGAIN])
    except _CancelledError:
        raise MeasurementCancelledError(done, total) from None
    finally:
        try:
            replayer.reset()  # (raises again when a worker was lost: the same error)
        finally:
            gc.unfreeze()
    if not tally.turns:
        raise GambitError(
            "None of the chosen turns fits in the context window: raise the context size."
        )
    return _report(engine, turns, configs, tally, costs, config, started, notes)


def _rotation(names: Sequence[str]) -> list[str]:
    """Every replay of a turn: target-only twice, half the rotation apart
    (their difference is the noise), the configurations between."""
    half = (len(names) + 1) // 2
    return [TARGET_ONLY, *names[:half], TARGET_ONLY_AGAIN, *names[half:]]


def replays_per_turn(n_configs: int) -> int:
    """How many times a turn is replayed with ``n_configs`` configurations:
    each once and target-only twice (``_rotation``)."""
    return n_configs + 2


def _mode_label(mode: str, configs: Sequence[MeasureConfig]) -> str:
    return next((c.label for c in configs if c.name == mode), "target only")


def _warm_up(
    replayer: _Replayer,
    costs: CostModel,
    configs: Sequence[MeasureConfig],
    sampling: SamplingParams,
) -> None:
    """First decodes pay for graph set-up and page faults: not a turn's cost.
    Warmed on decoders of their own, so no controller learns from it."""
    prompt = replayer.prompt([Message("user", "Hello")], 4)
    warm = GenerationConfig(max_tokens=4, sampling=sampling)
    replayer.run(replayer.decoder(None, costs), prompt, warm)
    model = next((c for c in configs if spec(c.drafter).loads_model), None)
    if model is not None:  # the draft model's first decodes too
        drafting = dataclasses.replace(model, policy="fixed=1", tree=False)
        replayer.run(replayer.decoder(drafting, costs), prompt, warm)


def _figures(totals: dict[str, ModeTotals], tally: _Tally | None = None) -> dict[str, Any]:
    """Every mode's figures, speedups against target-only within the same turns."""
    base = totals[TARGET_ONLY].figures() if TARGET_ONLY in totals else {}
    out: dict[str, Any] = {}
    for mode, t in totals.items():
        f: dict[str, Any] = t.figures()
        f["drafted_tokens"] = t.stats.n_drafted  # 0: it placed no bet
        f["accepted_tokens"] = t.stats.n_accepted  # 0: nothing to claim (speedup None)
        f["speedup"] = _ratio(f["tokens_per_s"], base.get("tokens_per_s"), mode, t)
        f["end_to_end_speedup"] = _ratio(
            f["end_to_end_tokens_per_s"], base.get("end_to_end_tokens_per_s"), mode, t
        )
        if tally is not None and mode != TARGET_ONLY:
            n = tally.compared[mode]
            f["divergence_rate"] = tally.diverged[mode] / n if n else None
        out[mode] = f
    return out


def _ratio(rate: float, base: float | None, mode: str, totals: ModeTotals) -> float | None:
    """A mode's speedup against the target-only replays of the same turns: 1.0
    for target-only; None for a mode that had no draft token accepted (it did
    the target-only work, or wasted drafts on top of it: a ratio of its rate to
    plain decoding's would only measure noise, and it claims no gain)."""
    if mode == TARGET_ONLY:
        return 1.0
    if not totals.stats.n_accepted:
        return None
    return speedup(rate, base or 0.0, totals.stats.n_drafted) or 0.0


def _report(
    engine: Engine,
    turns: Sequence[HistoryTurn],
    configs: Sequence[MeasureConfig],
    tally: _Tally,
    costs: CostModel,
    config: GenerationConfig,
    started: float,
    notes: Sequence[str],
) -> dict[str, Any]:
    cfg = engine.config
    modes = [TARGET_ONLY, *(c.name for c in configs)]
    suites = {
        s: _figures({m: by[m] for m in modes if m in by}, tally if s == "ALL" else None)
        for s, by in sorted(tally.suites.items(), key=lambda kv: (kv[0] == "ALL", kv[0]))
    }
    titles = {t.conversation_id: t.title for t in turns}
    conversations = []
    for cid, by in tally.conversations.items():
        figures = _figures({m: by[m] for m in modes if m in by})
        conversations.append({
            "id": cid,
            "title": titles.get(cid, ""),
            "turns": sum(tally.kinds[cid].values()),
            "kind": tally.kinds[cid].most_common(1)[0][0],
            "modes": {
                m: {k: f[k] for k in ("speedup", "acceptance_rate", "tokens_per_s", "tokens",
                                      "drafted_tokens", "accepted_tokens")}
                for m, f in figures.items()
            },
        })  # fmt: skip
    compared = sum(tally.compared.values())
    summary = cost_summary(costs)
    regime, sentence = regime_sentence(summary["t_ratio"]["5"], cfg.target.name)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "source": "history",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "duration_s": round(time.time() - started, 2),
        # bench's fields, with the same meaning
        "target": str(cfg.target),
        "draft": str(cfg.draft) if cfg.draft else None,
        "drafter": cfg.drafter,
        "drafter_name": engine.drafter.name if engine.drafter else None,
        "gamma": cfg.gamma,
        "tree_nodes": cfg.tree_nodes if trees_available(engine) else None,
        "temperature": config.sampling.temperature,
        "seed": config.sampling.seed,
        "max_tokens": config.max_tokens,
        "threads": engine.target.n_threads,
        "suites": suites,
        "identical_outputs": f"{compared - sum(tally.diverged.values())}/{compared}",
        # what a measurement on the user's chats adds
        "turns": tally.turns,
        "skipped_turns": tally.skipped,
        "modes": [TARGET_ONLY_MODE, *(c.describe() for c in configs)],
        "conversations": conversations,
        "regime": {"name": regime, "sentence": sentence, **summary},
        "noise": baseline_noise(tally.baselines),
        "busy": {
            "replays": tally.busy_replays,
            "of": tally.replays,
            "other_cores": tally.other_cores / tally.replays if tally.replays else 0.0,
        },
        "machine": machine_info(engine),
        "models": models_info(engine),
        "settings": {
            "n_ctx": engine.target.n_ctx,
            "gamma_max": cfg.gamma_max,
            "tree_nodes": cfg.tree_nodes,
            "lookup_ngram_max": cfg.lookup_ngram_max,
            "kernels": engine.target_kernels.describe(),
        },
        "notes": list(notes),
    }
    report["recommendation"] = recommend(report)
    return report


def machine_info(engine: Engine) -> dict[str, Any]:
    backend = detect_backend()
    cpu = cpu_id()
    return {
        "cpu": cpu,
        "cpu_model": cpu.rsplit(" ", 1)[0],  # without the flags digest
        "cpu_features": list(backend.cpu_features),
        "gpu_offload": backend.gpu_offload,
        "threads": engine.target.n_threads or default_threads(),
    }


def models_info(engine: Engine) -> dict[str, Any]:
    def one(path: Any) -> dict[str, Any] | None:
        if path is None:
            return None
        try:
            size = path.stat().st_size
        except OSError:
            size = None
        return {"file": path.name, "path": str(path), "size": size}

    return {"target": one(engine.config.target), "draft": one(engine.config.draft)}
