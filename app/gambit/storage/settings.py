"""User settings: one frozen dataclass, kept as JSON in the config folder.

The field defaults of ``Settings`` are the table of defaults; nothing else
repeats them. A settings file is read leniently (a damaged file or a bad value
costs that value, never the app's start), and written atomically (a crash
mid-save leaves the old file, never half a new one). A damaged file is moved
aside (``settings.json.corrupt-<time>``) and ``SettingsStore.load_errors`` says
so, for the window to show.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gambit.engine.decoder import GenerationConfig
from gambit.engine.limits import threads_problem
from gambit.engine.runtime import RuntimeOptions
from gambit.engine.sampling import SamplingParams
from gambit.engine.session import (
    TREE_DRAFTERS,  # the drafters that can propose a token tree instead of a chain
    TREE_NODES_MAX,
    TREE_NODES_MIN,  # draft tokens per tree round (the verification batch is one more)
    DrafterKind,
    EngineConfig,
)
from gambit.errors import GambitError
from gambit.storage import paths
from gambit.storage.files import set_aside, write_atomic

log = logging.getLogger(__name__)

PolicyChoice = Literal["adaptive", "fixed"]  # "off" is the separate speculation switch

GAMMA_MAX_LIMIT = 16  # calibration measures every batch size up to γ_max + 1
MAX_TOKENS_LIMIT = 32768
CONTEXT_MIN, CONTEXT_MAX = 256, 131072


@dataclass(frozen=True)
class Settings:
    """Everything the user can set. Change one with ``with_``; check with ``validate``."""

    # Models
    target_model: str = ""  # "": the embedded default model
    drafter: DrafterKind = "lookup"  # "layerskip": the target itself, some blocks skipped
    draft_model: str = ""  # with drafter="draft"
    # Speculation
    speculation: bool = True  # off: the drafter stays loaded, rounds draft nothing
    policy: PolicyChoice = "adaptive"
    fixed_gamma: int = 4
    gamma_max: int = 8
    tree_drafts: bool = False  # a token tree per round instead of a chain (TREE_DRAFTERS)
    tree_nodes: int = 8  # the most draft tokens in one tree round
    # Sampling
    temperature: float = 0.7
    top_k: int = 40  # 0: off
    top_p: float = 0.95  # 1: off
    min_p: float = 0.05  # 0: off
    repeat_penalty: float = 1.0  # 1: off
    seed: int = -1  # -1: a fresh random seed per reply
    max_tokens: int = 512
    system_prompt: str = ""
    # Runtime
    threads: int = 0  # 0: automatic (the physical cores)
    gpu_layers_target: int = 0  # -1: all layers
    gpu_layers_draft: int = 0
    context_size: int = 4096
    exact_kernels: bool = True  # RuntimeOptions.strict_batch_invariance
    # Display
    highlight_drafted: bool = True
    show_stats: bool = True

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (an unknown name is a TypeError)."""
        return dataclasses.replace(self, **changes)

    def target_path(self) -> Path | None:
        """The chosen target model file, or None for the embedded default model."""
        return Path(self.target_model).expanduser() if self.target_model else None

    def draft_path(self) -> Path | None:
        """The draft model file when the drafter is a draft model."""
        if self.drafter == "draft" and self.draft_model:
            return Path(self.draft_model).expanduser()
        return None

    # --------------------------------------------------------------- validation
    def validate(self) -> list[str]:
        """Every problem, as a sentence that names the setting; [] if all is well."""
        problems: list[str] = []

        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                options = ", ".join(repr(c) for c in choices)
                problems.append(f"{LABELS[name]} must be one of {options}.")

        # A non-finite number passes or fails the range checks below by accident
        # (NaN compares false with everything), so it gets its own sentence.
        unusable = {
            name
            for name, tp in _TYPES.items()
            if tp is float and not math.isfinite(getattr(self, name))
        }
        problems += [f"{LABELS[name]} must be a finite number." for name in sorted(unusable)]

        def check(name: str, ok: bool, message: str) -> None:
            if name not in unusable and not ok:
                problems.append(message)

        target = self.target_path()
        if target is not None:
            problems += _file_problems("Target model", target)
        if self.drafter == "draft":
            draft = self.draft_path()
            if draft is None:
                problems.append("Draft model: choose a file when the drafter is 'draft model'.")
            else:
                problems += _file_problems("Draft model", draft)

        check(
            "gamma_max",
            1 <= self.gamma_max <= GAMMA_MAX_LIMIT,
            f"Max γ must be between 1 and {GAMMA_MAX_LIMIT}.",
        )
        check(
            "fixed_gamma",
            1 <= self.fixed_gamma <= self.gamma_max,
            f"Fixed γ must be between 1 and max γ ({self.gamma_max}).",
        )
        check(
            "tree_nodes",
            TREE_NODES_MIN <= self.tree_nodes <= TREE_NODES_MAX,
            f"Tree nodes must be between {TREE_NODES_MIN} and {TREE_NODES_MAX}.",
        )
        check("temperature", self.temperature >= 0, "Temperature must be 0 or more.")
        check("top_k", self.top_k >= 0, "Top-k must be 0 (off) or more.")
        check("top_p", 0 < self.top_p <= 1, "Top-p must be more than 0 and at most 1.")
        check("min_p", 0 <= self.min_p < 1, "Min-p must be 0 or more and less than 1.")
        check("repeat_penalty", self.repeat_penalty > 0, "Repeat penalty must be more than 0.")
        check("seed", self.seed >= -1, "Seed must be -1 (random) or a number 0 or more.")
        check(
            "max_tokens",
            1 <= self.max_tokens <= MAX_TOKENS_LIMIT,
            f"Max tokens must be between 1 and {MAX_TOKENS_LIMIT}.",
        )
        threads = threads_problem(self.threads)
        check("threads", threads is None, f"{LABELS['threads']} {threads}.")
        for name in ("gpu_layers_target", "gpu_layers_draft"):
            check(
                name,
                getattr(self, name) >= -1,
                f"{LABELS[name]} must be -1 (all), 0 (none) or more.",
            )
        context_ok = CONTEXT_MIN <= self.context_size <= CONTEXT_MAX
        check(
            "context_size",
            context_ok,
            f"Context size must be between {CONTEXT_MIN} and {CONTEXT_MAX} tokens.",
        )
        # The reply is reserved in the context window before the prompt goes in,
        # so a reply as long as the window would leave no room for the question.
        if context_ok and 1 <= self.max_tokens <= MAX_TOKENS_LIMIT:
            check(
                "max_tokens",
                self.max_tokens < self.context_size,
                f"Max tokens ({self.max_tokens}) must be less than the context size "
                f"({self.context_size}).",
            )
        return problems

    # ------------------------------------------------------------ engine config
    def target_options(self) -> RuntimeOptions:
        """How llama.cpp runs the target (and, but for GPU layers, the draft)."""
        return RuntimeOptions(
            n_ctx=self.context_size,
            n_threads=self.threads,
            n_gpu_layers=self.gpu_layers_target,
            strict_batch_invariance=self.exact_kernels,
        )

    def engine_config(
        self, target_path: Path, layer_skip_draft: Path | None = None
    ) -> EngineConfig:
        """The engine to load, with ``target_path`` resolved by the caller
        (``target_path()``, or the default model when that is None).

        The drafter is loaded even when speculation is off: the switch is
        flipped on the running engine (``decoder.speculation_enabled``), which
        keeps what the γ controller has learned. Tree drafts are asked for only
        with a drafter that can draft a tree. With the "layerskip" drafter the
        draft is ``layer_skip_draft``, the target's layer-skip GGUF, which the
        worker finds (or measures, the first time) before it builds the config;
        it is ignored for the other drafters. Call ``validate()`` first:
        invalid values raise ValueError here.
        """
        target_options = self.target_options()
        draft = layer_skip_draft if self.drafter == "layerskip" else self.draft_path()
        return EngineConfig(
            target=target_path,
            drafter=self.drafter,
            draft=draft,
            target_options=target_options,
            draft_options=dataclasses.replace(target_options, n_gpu_layers=self.gpu_layers_draft),
            policy=self.policy,
            gamma=self.fixed_gamma,
            gamma_max=self.gamma_max,
            tree=self.tree_drafts and self.drafter in TREE_DRAFTERS,
            tree_nodes=self.tree_nodes,
            kernel_cache=paths.cache_dir(),
        )

    def generation_config(self) -> GenerationConfig:
        """Sampling and length of a reply. Invalid values raise ValueError."""
        return GenerationConfig(
            max_tokens=self.max_tokens,
            sampling=SamplingParams(
                temperature=float(self.temperature),
                top_k=self.top_k,
                top_p=float(self.top_p),
                min_p=float(self.min_p),
                repeat_penalty=float(self.repeat_penalty),
                seed=self.seed if self.seed >= 0 else None,
            ),
        )


# The name each setting has in the settings dialog, for messages about it.
LABELS: dict[str, str] = {
    "target_model": "Target model",
    "drafter": "Drafter",
    "draft_model": "Draft model",
    "speculation": "Speculation",
    "policy": "γ policy",
    "fixed_gamma": "Fixed γ",
    "gamma_max": "Max γ",
    "tree_drafts": "Tree drafts",
    "tree_nodes": "Tree nodes",
    "temperature": "Temperature",
    "top_k": "Top-k",
    "top_p": "Top-p",
    "min_p": "Min-p",
    "repeat_penalty": "Repeat penalty",
    "seed": "Seed",
    "max_tokens": "Max tokens",
    "system_prompt": "System prompt",
    "threads": "Threads",
    "gpu_layers_target": "GPU layers (target)",
    "gpu_layers_draft": "GPU layers (draft)",
    "context_size": "Context size",
    "exact_kernels": "Exact kernels",
    "highlight_drafted": "Highlight drafted tokens",
    "show_stats": "Show statistics",
}


# Field name -> type, with the string annotations resolved (Literal included).
_TYPES: dict[str, Any] = typing.get_type_hints(Settings)
# The fields with a fixed set of values, and those values.
_CHOICES: dict[str, tuple[str, ...]] = {
    name: typing.get_args(tp) for name, tp in _TYPES.items() if typing.get_origin(tp) is Literal
}


def _file_problems(label: str, path: Path) -> list[str]:
    if not path.exists():
        return [f"{label} file not found: {path}"]
    if not path.is_file():
        return [f"{label} is not a file: {path}"]
    return []


# -------------------------------------------------------------------- the file
class SettingsError(GambitError):
    """The settings could not be saved."""


_MISSING = object()

# Settings whose bad values crash llama.cpp when the engine loads (a negative
# thread count does), with their rule: such a value is replaced by the default
# when the file is read, so that the app always starts. Other values out of
# range load as they are, for validate() and the dialog to point out.
_UNSAFE: dict[str, Callable[[Any], str | None]] = {"threads": threads_problem}


def _coerce(tp: Any, value: Any) -> Any:
    """``value`` from JSON as the field type ``tp`` wants it, or _MISSING."""
    if typing.get_origin(tp) is Literal:
        return value if value in typing.get_args(tp) else _MISSING
    if tp is bool:
        return value if isinstance(value, bool) else _MISSING
    # bool is an int subclass in Python; true/false is never a number here.
    if isinstance(value, bool):
        return _MISSING
    if tp is int:
        if isinstance(value, int):
            return value
        # 4.0 from a hand edit or another JSON writer means 4
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return _MISSING
    if tp is float:
        if not isinstance(value, (int, float)):
            return _MISSING
        try:
            return float(value)
        except OverflowError:  # an integer with hundreds of digits
            return _MISSING
    if tp is str:
        return value if isinstance(value, str) else _MISSING
    raise TypeError(f"no JSON reading for settings of type {tp!r}")  # a new field type


def _expected(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(json.dumps(c) for c in typing.get_args(tp))
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}
    return names.get(tp, str(tp))


def _shown(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SettingsStore:
    """Reads and writes ``Settings`` as JSON (default: config folder/settings.json)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else paths.config_dir() / "settings.json"
        # What the last load() could not use, as sentences for the user.
        self.load_errors: list[str] = []
        self._repair = True

    def load(self, *, repair: bool = True) -> Settings:
        """The saved settings; the defaults for whatever is missing or unusable.
        ``repair`` False: leave a damaged file where it is (``--about`` and the
        self-test only look; the app sets it aside at start)."""
        self.load_errors = []
        self._repair = repair
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Settings()
        except OSError as exc:
            self.load_errors.append(
                f"Could not read the settings file {self.path} ({exc.strerror or exc}); "
                "using the default settings."
            )
            return Settings()

        try:
            data = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
            return self._damaged(f"not valid JSON: {exc}")
        except RecursionError:  # "[[[[..." nested deeper than Python's stack
            return self._damaged("nested too deeply to read")
        if not isinstance(data, dict):
            return self._damaged("not a JSON object")

        values: dict[str, Any] = {}
        defaults = Settings()
        for name, tp in _TYPES.items():
            if name not in data:
                continue
            value = _coerce(tp, data[name])
            if value is not _MISSING and name in _UNSAFE:
                problem = _UNSAFE[name](value)
                if problem is not None:
                    message = (
                        f"{LABELS[name]} {problem} in {self.path.name}; using the default "
                        f"({_shown(getattr(defaults, name))})."
                    )
                    log.warning("%s", message)
                    self.load_errors.append(message)
                    continue
            if value is _MISSING:
                self.load_errors.append(
                    f"{LABELS[name]}: expected {_expected(tp)} in {self.path.name}, "
                    f"found {_shown(data[name])}; using the default "
                    f"({_shown(getattr(defaults, name))})."
                )
            else:
                values[name] = value
        unknown = sorted(set(data) - set(_TYPES))
        if unknown:  # from a newer Gambit, or a setting since removed
            log.info("ignoring unknown settings: %s", ", ".join(unknown))
        return Settings(**values)

    def _damaged(self, reason: str) -> Settings:
        message = f"The settings file {self.path} is damaged ({reason}); using the default settings"
        if not self._repair:
            self.load_errors.append(message + ".")
            return Settings()
        message += f"; {set_aside(self.path)}."
        log.warning("%s", message)
        self.load_errors.append(message)
        return Settings()

    def save(self, settings: Settings) -> None:
        """Write ``settings``: a temporary file in the same folder, then renamed
        over the old one, so a reader sees the old file or the new, never part."""
        text = json.dumps(dataclasses.asdict(settings), indent=2, ensure_ascii=False) + "\n"
        try:
            write_atomic(self.path, text)
        except OSError as exc:
            raise SettingsError(
                f"Could not save the settings to {self.path}: {exc.strerror or exc}."
            ) from exc
