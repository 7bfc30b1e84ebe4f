"""User settings: one frozen dataclass, kept as JSON in the config folder.

The field defaults of ``Settings`` are the table of defaults; nothing else
repeats them (those that reach the engine are its records' own defaults,
taken from there). A setting the command line also takes declares its flag
here too (``gambit.cli.setting_flags`` makes the argument).

A settings file is read leniently (a damaged file or a bad value costs that
value, never the app's start), and written atomically (a crash mid-save
leaves the old file, never half a new one). A damaged file is moved aside
(``settings.json.corrupt-<time>``) and ``SettingsStore.load_errors`` says so,
for the window to show.
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

from gambit.engine.drafters.registry import DRAFTERS, TREE_DRAFTERS, DrafterKind, FileSource
from gambit.engine.gamma.policy import DEFAULT_GAMMA, DEFAULT_GAMMA_MAX
from gambit.engine.machine import rpc
from gambit.engine.machine.limits import THREADS_MAX, threads_problem, workers_problem
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import DEFAULT_TREE_NODES, TREE_NODES_MAX, TREE_NODES_MIN, EngineConfig
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError
from gambit.fsutil import write_atomic
from gambit.storage import paths
from gambit.storage.files import set_aside
from gambit.storage.json_values import MISSING, coerce, expected, shown
from gambit.storage.setting import Setting, declare

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
LOOKUP_MEMORY_HELP = (  # (gambit.storage.history_memory)
    "Prompt lookup also copies from your earlier conversations: code you pasted, your usual"
    " formats. Its index stays in your data folder; off, they are not read."
)
_INT_MAX = 2**31 - 1  # a spin box's top
# The engine's records hold the defaults of what reaches them (the engine
# cannot import this module); the settings below take them from there.
_SAMPLING = SamplingParams()
_RUNTIME = RuntimeOptions()
_REPLY = GenerationConfig()


@dataclass(frozen=True)
class Settings:
    """Everything the user can set. Change one with ``with_``; check with ``validate``.

    Each field is declared once, here: its default and its ``Setting``
    (label, help, range, whether it reloads the models). The labels, the
    validation, the dialog's ranges and help lines, the window's reload
    set and the command line's flags are all read from these declarations.
    """

    # Models
    # target_model "": the embedded default; draft_model: with file="chosen" drafters
    target_model: str = declare("", "Target model", reloads=True, model_file=True)
    # (RUF009: declare returns a dataclasses.field, as ruff cannot see)
    drafter: DrafterKind = declare("lookup", "Drafter", reloads=True, model_file=True)  # noqa: RUF009
    draft_model: str = declare("", "Draft model", reloads=True, model_file=True)
    # Speculation
    speculation: bool = declare(  # off: the drafter stays loaded, rounds draft nothing
        True,
        "Speculation",
        help="A drafter proposes tokens and the target checks them in one pass;"
        " the output is the target's either way.",
    )
    policy: PolicyChoice = declare(  # noqa: RUF009
        "adaptive",
        "γ policy",
        reloads=True,
        help="Adaptive drafts longer while guesses are accepted and shorter when they"
        " are not; Fixed always drafts γ tokens.",
    )
    fixed_gamma: int = declare(
        DEFAULT_GAMMA,
        "Fixed γ",
        reloads=True,
        low=1,
        high_field="gamma_max",
        rule="must be between 1 and max γ ({gamma_max}).",
        spin=(1, GAMMA_MAX_LIMIT),
        flag="--gamma",
        flag_help="draft tokens per round with --policy fixed",
    )
    gamma_max: int = declare(
        DEFAULT_GAMMA_MAX,
        "Max γ",
        reloads=True,
        low=1,
        high=GAMMA_MAX_LIMIT,
        rule=f"must be between 1 and {GAMMA_MAX_LIMIT}.",
        help="The longest draft: the adaptive policy's ceiling and the limit for fixed γ.",
        flag="--gamma-max",
        flag_help="the most draft tokens the adaptive policy uses",
    )
    tree_drafts: bool = declare(
        False,
        "Tree drafts",
        reloads=True,
        help=TREE_HELP,
        flag="--tree",
        flag_help="draft token trees: side candidates next to the chain, verified in one batch",
    )
    tree_nodes: int = declare(  # the most draft tokens in one tree round
        DEFAULT_TREE_NODES,
        "Tree nodes",
        reloads=True,
        low=TREE_NODES_MIN,
        high=TREE_NODES_MAX,
        rule=f"must be between {TREE_NODES_MIN} and {TREE_NODES_MAX}.",
        help="The most draft tokens in one tree round; the target checks them, plus one,"
        " in a single batch.",
        flag="--tree-nodes",
        flag_help="with --tree, the most draft tokens per round, chain and side nodes",
    )
    # Sampling
    temperature: float = declare(
        _SAMPLING.temperature,
        "Temperature",
        low=0,
        rule="must be 0 or more.",
        spin=(0.0, 5.0),
        help="Higher is more varied; 0 always takes the most likely token.",
        flag="--temp",
        flag_help="temperature, 0 for greedy",
    )
    top_k: int = declare(  # 0: off
        _SAMPLING.top_k,
        "Top-k",
        low=0,
        rule="must be 0 (off) or more.",
        spin=(0, 100_000),
        flag="--top-k",
        flag_help="keep the k likeliest tokens; 0 is off",
    )
    top_p: float = declare(  # 1: off
        _SAMPLING.top_p,
        "Top-p",
        low=0,
        low_open=True,
        high=1,
        rule="must be more than 0 and at most 1.",
        spin=(0.01, 1.0),
        help="Keeps the likeliest tokens up to this share; 1 is off.",
        flag="--top-p",
    )
    min_p: float = declare(  # 0: off
        _SAMPLING.min_p,
        "Min-p",
        low=0,
        high=1,
        high_open=True,
        rule="must be 0 or more and less than 1.",
        spin=(0.0, 0.99),
        help="Drops tokens less likely than this fraction of the top token.",
        flag="--min-p",
    )
    repeat_penalty: float = declare(  # 1: off
        _SAMPLING.repeat_penalty,
        "Repeat penalty",
        low=0,
        low_open=True,
        rule="must be more than 0.",
        spin=(0.05, 5.0),
        help="1 is off; higher discourages repeats.",
        flag="--repeat-penalty",
    )
    seed: int = declare(  # -1: a fresh random seed per reply
        -1,
        "Seed",
        low=-1,
        rule="must be -1 (random) or a number 0 or more.",
        spin=(-1, _INT_MAX),
        help="Fix it to get the same reply for the same prompt.",
        flag="--seed",
        flag_help="fix it for the same reply to the same prompt; -1 is a fresh one per reply",
    )
    max_tokens: int = declare(
        _REPLY.max_tokens,
        "Max tokens",
        low=1,
        high=MAX_TOKENS_LIMIT,
        rule=f"must be between 1 and {MAX_TOKENS_LIMIT}.",
        help="Longest reply.",
        flag="--max-tokens",
    )
    system_prompt: str = declare(
        "",
        "System prompt",
        help="Sent before every conversation to set the assistant's role and tone."
        " Leave empty to use the model's own default.",
    )
    # Runtime
    threads: int = declare(  # 0: automatic (gambit.engine.machine.threads)
        _RUNTIME.n_threads,
        "Threads",
        help="Automatic: the cores other programs leave free, as their load changes.",
        reloads=True,
        problem=threads_problem,
        spin=(0, THREADS_MAX),
        flag="--threads",
        flag_help=f"CPU threads, 1 to {THREADS_MAX}; 0: automatic, the cores left free",
    )
    gpu_layers_target: int = declare(  # -1: all layers
        _RUNTIME.n_gpu_layers,
        "GPU layers (target)",
        reloads=True,
        low=-1,
        rule="must be -1 (all), 0 (none) or more.",
        spin=(-1, 9999),
        # (the command line offloads the draft's layers alike: gambit.cli.main)
        flag="--gpu-layers",
        flag_help="layers to offload to the GPU, -1 for all",
    )
    gpu_layers_draft: int = declare(
        _RUNTIME.n_gpu_layers,
        "GPU layers (draft)",
        reloads=True,
        low=-1,
        rule="must be -1 (all), 0 (none) or more.",
        spin=(-1, 9999),
        help="Layers offloaded to the GPU; 0 runs on the CPU only.",
    )
    context_size: int = declare(
        _RUNTIME.n_ctx,
        "Context size",
        reloads=True,
        low=CONTEXT_MIN,
        high=CONTEXT_MAX,
        rule=f"must be between {CONTEXT_MIN} and {CONTEXT_MAX} tokens.",
        help="Longest conversation the model keeps in view.",
        flag="--ctx",
        flag_help="context size in tokens",
    )
    exact_kernels: bool = declare(
        _RUNTIME.strict_batch_invariance,
        "Exact kernels",
        reloads=True,
        help=EXACT_KERNELS_HELP,
        flag="--fast-kernels",
        flag_sets=False,
        flag_help="run the target on the fastest kernels that work on this CPU (a one-time "
        "probe finds them), even where their batched logits differ from single-token "
        "ones: at temperature 0 speculation may then pick a different token than plain "
        "decoding where the target's top candidates (nearly) tie. Without it, the "
        "fastest batch-invariant kernels; the draft always runs the fastest",
    )
    # Workers (gambit-worker, host:port) that hold the target's layers; the draft stays here
    rpc_workers: tuple[str, ...] = declare(
        (),
        "Workers",
        reloads=True,
        problem=workers_problem,
        flag="--rpc",
        flag_help="gambit-workers that hold the target's layers (llama.cpp RPC; start "
        "`gambit-worker` there first); the draft and prompt lookup run here",
    )
    worker_layers: int = declare(  # 0: all; with no workers it is not used
        0,
        "Worker layers",
        reloads=True,
        low=0,
        rule="must be 0 (all) or more.",
        spin=(0, 9999),
        help="How many of the target's layers the workers hold (split by their free"
        " memory); the rest run here. 0 puts them all on the workers.",
        flag="--worker-layers",
        flag_help="with --rpc, how many of the target's layers the workers hold, split by "
        "their free memory, the rest running here; 0: all",
    )
    lookup_memory: bool = declare(True, "Copy from earlier chats", help=LOOKUP_MEMORY_HELP)
    # Display
    highlight_drafted: bool = declare(
        True,
        "Highlight drafted tokens",
        help="Tints the tokens the target accepted from the drafter.",
    )
    show_stats: bool = declare(
        True, "Show statistics", help="Speed and acceptance rate under the chat."
    )
    even_streaming: bool = declare(True, "Even streaming", help=EVEN_STREAMING_HELP)
    # Local server (Tools → Local server; gambit-cli serve takes the same as flags)
    server_host: str = declare(
        DEFAULT_HOST,
        "Server address",
        help="127.0.0.1: this machine only.",
        flag="--host",
        flag_help="address to listen on (127.0.0.1: this machine only; the API has no "
        "encryption: use an SSH tunnel or a TLS proxy across a network)",
    )
    server_port: int = declare(
        DEFAULT_PORT,
        "Server port",
        low=0,
        high=65535,
        rule="must be between 0 (any free port) and 65535.",
        flag="--port",
        flag_help="port to listen on; 0: any free one",
    )
    server_api_key: str = declare(
        "",
        "API key",
        help="Empty: none. Else every request must send Authorization: Bearer KEY.",
        flag="--api-key",
        flag_help="require 'Authorization: Bearer KEY' on every request",
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
                check(name, declared.in_range(value, values), f"{declared.label} {rule}")
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

    def draft_options(self) -> RuntimeOptions:
        """How llama.cpp runs the draft: on this machine, with its own GPU layers."""
        return dataclasses.replace(
            self.target_options(), n_gpu_layers=self.gpu_layers_draft, rpc_workers=()
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
        derived = self._draft_file() == "derived"
        draft = layer_skip_draft if derived else self.draft_path()
        return EngineConfig(
            target=target_path,
            drafter=self.drafter,
            draft=draft,
            target_options=self.target_options(),
            draft_options=self.draft_options(),
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


# Field name -> type, with the string annotations resolved (Literal included).
_TYPES: dict[str, Any] = typing.get_type_hints(Settings)
# The fields with a fixed set of values, and those values.
_CHOICES: dict[str, tuple[str, ...]] = {
    name: typing.get_args(tp) for name, tp in _TYPES.items() if typing.get_origin(tp) is Literal
}


def _file_problems(label: str, path: Path) -> list[str]:
    problem = "is not a file" if path.exists() else "file not found"
    return [] if path.is_file() else [f"{label} {problem}: {path}"]


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
