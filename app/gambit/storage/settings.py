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

from gambit.engine import rpc
from gambit.engine.controller import DEFAULT_GAMMA, DEFAULT_GAMMA_MAX
from gambit.engine.decoder import GenerationConfig
from gambit.engine.drafters.registry import DRAFTERS, TREE_DRAFTERS, DrafterKind, FileSource
from gambit.engine.limits import THREADS_MAX, threads_problem, workers_problem
from gambit.engine.runtime import RuntimeOptions
from gambit.engine.sampling import SamplingParams
from gambit.engine.session import (
    TREE_NODES_MAX,
    TREE_NODES_MIN,  # draft tokens per tree round (the verification batch is one more)
    EngineConfig,
)
from gambit.errors import GambitError
from gambit.fsutil import write_atomic
from gambit.storage import paths
from gambit.storage.files import set_aside
from gambit.storage.json_values import MISSING, coerce, expected, shown

log = logging.getLogger(__name__)

PolicyChoice = Literal["adaptive", "fixed"]  # "off" is the separate speculation switch

GAMMA_MAX_LIMIT = 16  # calibration measures every batch size up to γ_max + 1
MAX_TOKENS_LIMIT = 32768
CONTEXT_MIN, CONTEXT_MAX = 256, 131072


TREE_HELP = (
    "Drafts several candidate continuations and verifies them all in one target batch."
    " Wins when batches are cheap (a GPU); on a CPU the controller measures the cost and"
    " may keep the tree narrow."
)
EXACT_KERNELS_HELP = (
    "Same tokens with speculation on and off at temperature 0; about 8 % slower decoding"
)
# The local server's address (gambit-cli serve's defaults too).
DEFAULT_HOST = "127.0.0.1"  # this machine only, unless the user names another
DEFAULT_PORT = 8000
EVEN_STREAMING_HELP = "Spreads each burst of accepted tokens over a round's time."
_INT_MAX = 2**31 - 1  # a spin box's top


@dataclass(frozen=True)
class Setting:
    """What one ``Settings`` field is, declared next to its default.

    ``label`` names it in the dialog and in every message about it; ``help``
    is the line under its widget. ``reloads``: a change needs the models
    loaded again (the field reaches ``EngineConfig`` or ``RuntimeOptions``).
    ``low``/``high`` bound valid values (``*_open``: the bound itself is not
    valid; ``high_field``: the bound is another field's value), and ``rule`` is
    the sentence after the label when a value is outside them. ``spin``: the
    dialog's range where it is narrower than the valid one (or has no end).
    ``problem``: a rule shared with the command line (``engine.limits``); a
    value it refuses crashes llama.cpp, so a settings file never loads it.
    ``model_file``: it names a model file or decides which ones load, so a
    change has the files checked (``models.settings_check``) before the
    running model is unloaded for it.
    """

    label: str
    help: str = ""
    reloads: bool = False
    model_file: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    high_field: str | None = None
    rule: str = ""
    spin: tuple[float, float] | None = None
    problem: Callable[[Any], str | None] | None = None

    @property
    def range(self) -> tuple[float, float]:
        """The dialog's spin-box range."""
        if self.spin is not None:
            return self.spin
        assert self.low is not None and self.high is not None, self.label
        return self.low, self.high


_T = typing.TypeVar("_T")


def _setting(default: _T, label: str, **declared: Any) -> _T:
    """A ``Settings`` field with its ``Setting`` (read back with ``SETTINGS``)."""
    field: _T = dataclasses.field(default=default, metadata={"setting": Setting(label, **declared)})
    return field


@dataclass(frozen=True)
class Settings:
    """Everything the user can set. Change one with ``with_``; check with ``validate``.

    Each field is declared once, here: its default and its ``Setting``
    (label, help, range, whether it reloads the models). The labels, the
    validation, the dialog's ranges and help lines and the window's reload
    set are all read from these declarations.
    """

    # Models
    # target_model "": the embedded default; draft_model: with file="chosen" drafters
    target_model: str = _setting("", "Target model", reloads=True, model_file=True)
    # (RUF009: _setting returns a dataclasses.field, as ruff cannot see)
    drafter: DrafterKind = _setting("lookup", "Drafter", reloads=True, model_file=True)  # noqa: RUF009
    draft_model: str = _setting("", "Draft model", reloads=True, model_file=True)
    # Speculation
    speculation: bool = _setting(  # off: the drafter stays loaded, rounds draft nothing
        True,
        "Speculation",
        help="A drafter proposes tokens and the target checks them in one pass;"
        " the output is the target's either way.",
    )
    policy: PolicyChoice = _setting(  # noqa: RUF009
        "adaptive",
        "γ policy",
        reloads=True,
        help="Adaptive drafts longer while guesses are accepted and shorter when they"
        " are not; Fixed always drafts γ tokens.",
    )
    fixed_gamma: int = _setting(
        DEFAULT_GAMMA,
        "Fixed γ",
        reloads=True,
        low=1,
        high_field="gamma_max",
        rule="must be between 1 and max γ ({gamma_max}).",
        spin=(1, GAMMA_MAX_LIMIT),
    )
    gamma_max: int = _setting(
        DEFAULT_GAMMA_MAX,
        "Max γ",
        reloads=True,
        low=1,
        high=GAMMA_MAX_LIMIT,
        rule=f"must be between 1 and {GAMMA_MAX_LIMIT}.",
        help="The longest draft: the adaptive policy's ceiling and the limit for fixed γ.",
    )
    tree_drafts: bool = _setting(False, "Tree drafts", reloads=True, help=TREE_HELP)
    tree_nodes: int = _setting(  # the most draft tokens in one tree round
        8,
        "Tree nodes",
        reloads=True,
        low=TREE_NODES_MIN,
        high=TREE_NODES_MAX,
        rule=f"must be between {TREE_NODES_MIN} and {TREE_NODES_MAX}.",
        help="The most draft tokens in one tree round; the target checks them, plus one,"
        " in a single batch.",
    )
    # Sampling
    temperature: float = _setting(
        0.7,
        "Temperature",
        low=0,
        rule="must be 0 or more.",
        spin=(0.0, 5.0),
        help="Higher is more varied; 0 always takes the most likely token.",
    )
    top_k: int = _setting(  # 0: off
        40, "Top-k", low=0, rule="must be 0 (off) or more.", spin=(0, 100_000)
    )
    top_p: float = _setting(  # 1: off
        0.95,
        "Top-p",
        low=0,
        low_open=True,
        high=1,
        rule="must be more than 0 and at most 1.",
        spin=(0.01, 1.0),
        help="Keeps the likeliest tokens up to this share; 1 is off.",
    )
    min_p: float = _setting(  # 0: off
        0.05,
        "Min-p",
        low=0,
        high=1,
        high_open=True,
        rule="must be 0 or more and less than 1.",
        spin=(0.0, 0.99),
        help="Drops tokens less likely than this fraction of the top token.",
    )
    repeat_penalty: float = _setting(  # 1: off
        1.0,
        "Repeat penalty",
        low=0,
        low_open=True,
        rule="must be more than 0.",
        spin=(0.05, 5.0),
        help="1 is off; higher discourages repeats.",
    )
    seed: int = _setting(  # -1: a fresh random seed per reply
        -1,
        "Seed",
        low=-1,
        rule="must be -1 (random) or a number 0 or more.",
        spin=(-1, _INT_MAX),
        help="Fix it to get the same reply for the same prompt.",
    )
    max_tokens: int = _setting(
        512,
        "Max tokens",
        low=1,
        high=MAX_TOKENS_LIMIT,
        rule=f"must be between 1 and {MAX_TOKENS_LIMIT}.",
        help="Longest reply.",
    )
    system_prompt: str = _setting(
        "",
        "System prompt",
        help="Sent before every conversation to set the assistant's role and tone."
        " Leave empty to use the model's own default.",
    )
    # Runtime
    threads: int = _setting(  # 0: automatic (the physical cores)
        0, "Threads", reloads=True, problem=threads_problem, spin=(0, THREADS_MAX)
    )
    gpu_layers_target: int = _setting(  # -1: all layers
        0,
        "GPU layers (target)",
        reloads=True,
        low=-1,
        rule="must be -1 (all), 0 (none) or more.",
        spin=(-1, 9999),
    )
    gpu_layers_draft: int = _setting(
        0,
        "GPU layers (draft)",
        reloads=True,
        low=-1,
        rule="must be -1 (all), 0 (none) or more.",
        spin=(-1, 9999),
        help="Layers offloaded to the GPU; 0 runs on the CPU only.",
    )
    context_size: int = _setting(
        4096,
        "Context size",
        reloads=True,
        low=CONTEXT_MIN,
        high=CONTEXT_MAX,
        rule=f"must be between {CONTEXT_MIN} and {CONTEXT_MAX} tokens.",
        help="Longest conversation the model keeps in view.",
    )
    exact_kernels: bool = _setting(  # RuntimeOptions.strict_batch_invariance
        True, "Exact kernels", reloads=True, help=EXACT_KERNELS_HELP
    )
    # Workers (gambit-worker, host:port) that hold the target's layers; the draft stays here
    rpc_workers: tuple[str, ...] = _setting((), "Workers", reloads=True, problem=workers_problem)
    worker_layers: int = _setting(  # 0: all; with no workers it is not used
        0,
        "Worker layers",
        reloads=True,
        low=0,
        rule="must be 0 (all) or more.",
        spin=(0, 9999),
        help="How many of the target's layers the workers hold (split by their free"
        " memory); the rest run here. 0 puts them all on the workers.",
    )
    # Display
    highlight_drafted: bool = _setting(
        True,
        "Highlight drafted tokens",
        help="Tints the tokens the target accepted from the drafter.",
    )
    show_stats: bool = _setting(
        True, "Show statistics", help="Speed and acceptance rate under the chat."
    )
    even_streaming: bool = _setting(True, "Even streaming", help=EVEN_STREAMING_HELP)
    # Local server (Tools → Local server; gambit-cli serve takes the same as flags)
    server_host: str = _setting(
        DEFAULT_HOST, "Server address", help="127.0.0.1: this machine only."
    )
    server_port: int = _setting(
        DEFAULT_PORT, "Server port", low=1, high=65535, rule="must be between 1 and 65535."
    )
    server_api_key: str = _setting(
        "", "API key", help="Empty: none. Else every request must send Authorization: Bearer KEY."
    )

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (an unknown name is a TypeError)."""
        return dataclasses.replace(self, **changes)

    def target_path(self) -> Path | None:
        """The chosen target model file, or None for the embedded default model."""
        return Path(self.target_model).expanduser() if self.target_model else None

    def draft_path(self) -> Path | None:
        """The draft model file when the drafter's file is the user's choice."""
        if self._draft_file() == "chosen" and self.draft_model:
            return Path(self.draft_model).expanduser()
        return None

    def _draft_file(self) -> FileSource:
        """Where the drafter's file comes from ("none" for an unknown drafter,
        which ``validate`` reports)."""
        found = DRAFTERS.get(self.drafter)
        return found.file if found is not None else "none"

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
        if self._draft_file() == "chosen":
            draft = self.draft_path()
            if draft is None:
                short = DRAFTERS[self.drafter].short
                problems.append(f"Draft model: choose a file when the drafter is '{short}'.")
            else:
                problems += _file_problems("Draft model", draft)

        values = dataclasses.asdict(self)
        for name, declared in SETTINGS.items():
            value = getattr(self, name)
            if declared.problem is not None:
                problem = declared.problem(value)
                check(name, problem is None, f"{declared.label} {problem}.")
            elif declared.rule:
                rule = declared.rule.format(**values)
                check(name, _in_range(declared, value, values), f"{declared.label} {rule}")
        context_ok = CONTEXT_MIN <= self.context_size <= CONTEXT_MAX
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
        """How llama.cpp runs the target (and, but for GPU layers and workers, the
        draft). With workers, n_gpu_layers counts the layers they hold (-1: all)."""
        workers = tuple(dict.fromkeys(map(rpc.parse_endpoint, self.rpc_workers)))
        return RuntimeOptions(
            n_ctx=self.context_size,
            n_threads=self.threads,
            n_gpu_layers=(self.worker_layers or -1) if workers else self.gpu_layers_target,
            strict_batch_invariance=self.exact_kernels,
            rpc_workers=workers,
        )

    def engine_config(
        self, target_path: Path, layer_skip_draft: Path | None = None
    ) -> EngineConfig:
        """The engine to load, with ``target_path`` resolved by the caller
        (``target_path()``, or the default model when that is None).

        The drafter is loaded even when speculation is off (switched on the
        running engine, which keeps what the γ controller has learned). Trees
        only with a drafter that drafts them. A drafter whose file is derived
        from the target (layer skip) drafts with ``layer_skip_draft``, which the
        worker finds (or measures) first. Invalid values raise ValueError.
        """
        target_options = self.target_options()
        derived = self._draft_file() == "derived"
        draft = layer_skip_draft if derived else self.draft_path()
        return EngineConfig(
            target=target_path,
            drafter=self.drafter,
            draft=draft,
            target_options=target_options,
            draft_options=dataclasses.replace(
                target_options, n_gpu_layers=self.gpu_layers_draft, rpc_workers=()
            ),
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


# Each field's declaration, in the order of the fields.
SETTINGS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in dataclasses.fields(Settings)}
# The name each setting has in the settings dialog, for messages about it.
LABELS: dict[str, str] = {name: declared.label for name, declared in SETTINGS.items()}
# The settings whose change needs the models loaded again.
RELOADS: frozenset[str] = frozenset(n for n, declared in SETTINGS.items() if declared.reloads)
# The settings whose change has the model files checked before it is applied.
MODEL_FIELDS: frozenset[str] = frozenset(n for n, d in SETTINGS.items() if d.model_file)


def _in_range(declared: Setting, value: float, values: dict[str, Any]) -> bool:
    """Whether ``value`` is within ``declared``'s bounds (``values``: every field's)."""
    high = values[declared.high_field] if declared.high_field else declared.high
    low = declared.low
    if low is not None and (value <= low if declared.low_open else value < low):
        return False
    return high is None or (value < high if declared.high_open else value <= high)


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


# Settings whose bad values crash llama.cpp when the engine loads (a negative
# thread count does), with their rule: such a value is replaced by the default
# when the file is read, so that the app always starts. Other values out of
# range load as they are, for validate() and the dialog to point out.
_UNSAFE: dict[str, Callable[[int], str | None]] = {
    name: declared.problem for name, declared in SETTINGS.items() if declared.problem is not None
}


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
            value = coerce(tp, data[name])
            if value is not MISSING and name in _UNSAFE:
                problem = _UNSAFE[name](value)
                if problem is not None:
                    message = (
                        f"{LABELS[name]} {problem} in {self.path.name}; using the default "
                        f"({shown(getattr(defaults, name))})."
                    )
                    log.warning("%s", message)
                    self.load_errors.append(message)
                    continue
            if value is MISSING:
                self.load_errors.append(
                    f"{LABELS[name]}: expected {expected(tp)} in {self.path.name}, "
                    f"found {shown(data[name])}; using the default "
                    f"({shown(getattr(defaults, name))})."
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
