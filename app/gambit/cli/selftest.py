"""``gambit --self-test``: does this installation work, and how fast is it here?

Loads the default model (or ``--target``), generates a short greedy reply
without speculation, then again with prompt lookup (and with ``--draft``, a
draft model), and checks that every run produced the same tokens: at
temperature 0 speculation must not change the output. Prints the backend
llama.cpp was built for, the speeds, the speedup, the model load time and the
cold-start time from process start to the first reply token. Exit status 0
when everything passed, 1 otherwise, with the reason on the ``result:`` line.

No widgets are created in this process (it runs on a machine without a
display): Qt is imported to check that the bundle carries it and its platform
plugins, and a child process opens a window on the platform plugin in use
(offscreen without a display), naming the missing system packages if it fails.

``gambit --about`` prints the version and backend lines only.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gambit import __version__
from gambit.cli.setting_flags import add_setting_flag
from gambit.engine.drafters.registry import DRAFTERS, DrafterKind
from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.machine import rpc
from gambit.engine.machine.backend import detect_backend
from gambit.engine.machine.kernels import KernelChoice, KernelProbe
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.machine.threads import default_threads
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError
from gambit.logs import setup_logging
from gambit.models.default_model import DEFAULT_MODEL_FILE, bundled_model_path, default_model_path
from gambit.storage.check import check_storage
from gambit.storage.paths import cache_dir, log_dir, models_dir
from gambit.storage.settings import SettingsStore

log = logging.getLogger(__name__)

# Replies repeat words of the prompt, so prompt lookup gets some drafts accepted
# and some rejected: both paths of verification run.
PROMPT = "List the days of the week, one per line, each followed by a short note about it."
DEFAULT_TOKENS = 32
TREE_SIDE_NODES = 2  # side nodes of the tree run, next to a chain of GAMMA
GAMMA = 4  # fixed draft length: every run exercises verification, not the controller
REPORT_FILE = "selftest.txt"

_T_IMPORT = time.time()


@dataclass
class RunResult:
    label: str
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    tokens_per_s: float = 0.0
    ttft_s: float = 0.0
    load_s: float = 0.0
    n_drafted: int = 0
    n_accepted: int = 0
    first_token_at: float = 0.0  # wall clock (time.time()) when the first token arrived


class Report:
    """Lines go to stdout (when there is one), the log, and a report file."""

    def __init__(self, out: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self._out = out

    def __call__(self, key: str, value: object = "") -> None:
        line = f"{key}: {value}" if value != "" else key
        self.lines.append(line)
        log.info("self-test: %s", line)
        if self._out is not None:
            self._out(line)

    def save(self) -> Path | None:
        path = log_dir() / REPORT_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        except OSError as exc:
            log.warning("could not write %s: %s", path, exc)
            return None
        return path


def _stdout_line(line: str) -> None:
    stream = sys.stdout
    if stream is not None:  # a windowed Windows app has no stdout
        with contextlib.suppress(OSError, ValueError):
            print(line, file=stream, flush=True)


# ------------------------------------------------------------------- timing
def process_start_time(fallback: float | None = None) -> float:
    """Wall-clock time (``time.time()``) when this process started.

    Read from the OS where it is easy (Linux, Windows); otherwise ``fallback``
    (the caller's earliest timestamp), or when this module was imported.
    """
    now = time.time()
    system = sys.platform  # a variable: mypy would drop the other platforms' branches
    try:
        if system.startswith("linux"):
            stat = Path("/proc/self/stat").read_text()
            # Field 22 (starttime, in clock ticks since boot); the command name
            # (field 2) may hold spaces, so count from its closing parenthesis.
            fields = stat[stat.rindex(")") + 2 :].split()
            start_ticks = int(fields[19])
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            return now - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
        if system == "win32":
            import ctypes
            from ctypes import wintypes

            kernel32 = getattr(ctypes, "windll").kernel32  # noqa: B009 (Windows only)
            times = [wintypes.FILETIME() for _ in range(4)]
            ok = kernel32.GetProcessTimes(
                kernel32.GetCurrentProcess(), *(ctypes.byref(t) for t in times)
            )
            if ok:
                ft = times[0]
                ticks = (ft.dwHighDateTime << 32) | ft.dwLowDateTime  # 100 ns since 1601
                return float(ticks / 1e7 - 11_644_473_600)
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    return fallback if fallback is not None else _T_IMPORT


# ------------------------------------------------------------------- facts
def llama_cpp_version() -> str:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:
        try:
            import llama_cpp

            return str(getattr(llama_cpp, "__version__", "unknown"))
        except Exception:
            return "unknown"


def about_lines() -> list[str]:
    """Version, platform and backend, one ``key: value`` per line."""
    info = detect_backend()
    lines = [
        f"gambit: {__version__}",
        f"python: {platform.python_version()} on {platform.platform()} ({platform.machine()})",
        f"bundle: {'frozen (installed app)' if getattr(sys, 'frozen', False) else 'no (Python)'}",
        f"llama-cpp-python: {llama_cpp_version()}",
        f"backend: {info.summary}",
        f"gpu offload: {'yes' if info.gpu_offload else 'no'}",
        f"rpc workers: {_rpc_support()}",
        f"cpu features: {', '.join(info.cpu_features) or 'none detected'}",
    ]
    devices = getattr(info, "devices", None)  # device names, where the backend reports them
    if devices:
        lines.append(f"devices: {', '.join(str(d) for d in devices)}")
    lines.append(f"system info: {info.system_info}")
    lines.extend(kernel_lines())
    lines.append(f"log folder: {log_dir()}")
    return lines


def _rpc_support() -> str:
    """Whether this llama.cpp can use gambit-workers (built with GGML_RPC)."""
    if rpc.supported():
        return "yes (llama.cpp has the RPC backend: gambit-worker and --rpc work)"
    return "no (llama.cpp was built without GGML_RPC: gambit-worker and --rpc are unavailable)"


def kernel_lines() -> list[str]:
    """The kernel probe's verdict for the configured target (probed now if it never was)."""
    settings = SettingsStore().load(repair=False)
    target = settings.target_path() or bundled_model_path() or models_dir() / DEFAULT_MODEL_FILE
    if not target.is_file():
        return ["kernels: not probed yet (no model on disk)"]
    try:
        verdict = KernelProbe(cache_dir()).verdict(
            target, settings.threads or default_threads(), settings.gpu_layers_target
        )
    except (OSError, ValueError) as exc:
        return [f"kernels: the probe could not run ({exc})"]
    exact = KernelChoice(verdict.exact(), "exact", verdict)
    fast = KernelChoice(verdict.fastest(), "fast", verdict)
    return [
        f"kernels ({target.name}, exact): {exact.describe()}",
        f"kernels ({target.name}, fast): {fast.describe()}",
    ]


def _qt_check(ui_check: Callable[[], object] | None) -> tuple[str, str | None]:
    """Import Qt (and, with ``ui_check``, the UI: the window's ``--self-test``
    passes one, which keeps this module below the UI), open a window in a
    child process; returns (description, problem)."""
    try:
        import PySide6
        from PySide6 import QtCharts, QtWidgets  # noqa: F401  (the modules must load)
        from PySide6.QtCore import QLibraryInfo

        if ui_check is not None:
            ui_check()
    except Exception as exc:
        return "not usable", f"Qt or the UI failed to load: {type(exc).__name__}: {exc}"
    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms"
    names = sorted(
        p.name.split(".")[0].removeprefix("lib").removeprefix("q")
        for p in plugins.glob("*")
        if p.suffix in {".so", ".dylib", ".dll"}
    )
    loaded = "QtWidgets + QtCharts" + (" + Gambit's UI" if ui_check is not None else "")
    desc = f"PySide6 {PySide6.__version__}, {loaded} ok, platforms: {', '.join(names)}"
    if not names:
        return desc, f"no Qt platform plugins in {plugins}"
    from gambit.qt.window_probe import check_window

    window = check_window()
    desc += f"; {window.detail}"
    return desc, None if window.ok else f"Qt: {window.detail}"


# ------------------------------------------------------------------- runs
def _run(
    label: str,
    target: Path,
    drafter: DrafterKind,
    draft: Path | None,
    args: argparse.Namespace,
    *,
    tree: bool = False,
) -> RunResult:
    options = RuntimeOptions(n_ctx=args.ctx, n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    config = EngineConfig(
        target=target,
        drafter=drafter,
        draft=draft,
        target_options=options,
        policy="fixed" if drafter != "none" else "off",
        gamma=GAMMA if drafter != "none" else 0,
        gamma_max=max(GAMMA, 1),
        # A tree round needs a multi-sequence, unified KV cache: check the
        # installed llama.cpp decodes those exactly too.
        tree=tree,
        tree_nodes=GAMMA + TREE_SIDE_NODES,
        fixed_side=TREE_SIDE_NODES if tree else 0,
        kernel_cache=cache_dir(),
    )
    result = RunResult(label)
    t0 = time.perf_counter()
    engine = Engine(config)
    try:
        result.load_s = time.perf_counter() - t0
        gen = GenerationConfig(
            max_tokens=args.tokens, sampling=SamplingParams(temperature=0.0, seed=0)
        )
        stats = GenerationStats()
        for rnd in engine.chat([Message("user", PROMPT)], gen):
            if rnd.tokens and not result.tokens:
                result.first_token_at = time.time()
            result.tokens.extend(rnd.tokens)
            result.text += rnd.text
            stats.add(rnd)
    finally:
        engine.close()
    result.tokens_per_s = stats.tokens_per_s
    result.ttft_s = stats.ttft_s
    result.n_drafted = stats.n_drafted
    result.n_accepted = stats.n_accepted
    return result


def _describe(run: RunResult, baseline: RunResult | None) -> str:
    parts = [
        f"{len(run.tokens)} tokens",
        f"{run.tokens_per_s:.1f} tok/s",
        f"ttft {run.ttft_s * 1000:.0f} ms",
        f"load {run.load_s:.2f} s",
    ]
    if run.n_drafted:
        rate = run.n_accepted / run.n_drafted
        parts.append(f"accepted {run.n_accepted}/{run.n_drafted} ({rate:.0%})")
    if baseline is not None and baseline.tokens_per_s > 0:
        parts.append(f"speedup {run.tokens_per_s / baseline.tokens_per_s:.2f}x")
    return ", ".join(parts)


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _report_installation(args: argparse.Namespace, report: Report) -> list[str]:
    """The build, the machine and the stores (settings, library, history, free
    disk); sets ``args.gpu_layers`` when it was left to the backend. Returns
    the problems found."""
    for line in about_lines():
        key, _, value = line.partition(": ")
        report(key, value)
    storage = check_storage()
    for what, finding in storage.lines:
        report(what, finding)
    if args.gpu_layers is None:
        args.gpu_layers = -1 if detect_backend().gpu_offload else 0
    report("gpu layers", "all" if args.gpu_layers < 0 else args.gpu_layers)
    return list(storage.problems)


def _check_identical(runs: list[RunResult], report: Report) -> list[str]:
    """Greedy replies with speculation must equal target-only's (runs[0])."""
    plain, problems = runs[0], []
    if not plain.tokens:
        problems.append("the model generated no tokens")
    for run in runs[1:]:
        if run.tokens == plain.tokens:
            report(f"check {run.label}", f"identical to target only ({len(run.tokens)} tokens)")
        else:
            at = _first_difference(run.tokens, plain.tokens)
            msg = (
                f"{run.label} differs from target only at token {at} "
                f"({len(run.tokens)} vs {len(plain.tokens)} tokens)"
            )
            report(f"check {run.label}", "MISMATCH: " + msg)
            problems.append(msg)
    return problems


def run_selftest(
    args: argparse.Namespace,
    *,
    started_at: float | None = None,
    out: Callable[[str], None] | None = _stdout_line,
    ui_check: Callable[[], object] | None = None,
) -> int:
    """Run the self-test described by ``args`` (see ``build_parser``); 0 = passed.
    ``ui_check`` imports the UI (the window passes it: see ``_qt_check``)."""
    report = Report(out)
    report("Gambit self-test")
    t_start = process_start_time(started_at)
    problems: list[str] = []
    try:
        problems.extend(_report_installation(args, report))

        target: Path | None = args.target
        if target is None:
            target = default_model_path()
        size_mb = target.stat().st_size / 1e6 if target.is_file() else 0.0
        report("model", f"{target} ({size_mb:.1f} MB)")
        if args.draft is not None:
            report("draft model", args.draft)

        runs: list[RunResult] = []
        plain = _run("target only", target, "none", None, args)
        runs.append(plain)
        report("load time", f"{plain.load_s:.2f} s")
        report(
            "cold start to first token",
            f"{plain.first_token_at - t_start:.2f} s (process start to the first reply token)",
        )
        report("run target only", _describe(plain, None))
        report("reply", repr(plain.text[:120]))
        lookup, draft = DRAFTERS["lookup"].short, DRAFTERS["draft"].short
        runs.append(_run(lookup, target, "lookup", None, args))
        report(f"run {lookup}", _describe(runs[-1], plain))
        runs.append(_run(f"{lookup} tree", target, "lookup", None, args, tree=True))
        report(f"run {lookup} tree", _describe(runs[-1], plain))
        if args.draft is not None:
            runs.append(_run(draft, target, "draft", args.draft, args))
            report(f"run {draft}", _describe(runs[-1], plain))

        problems.extend(_check_identical(runs, report))

        if args.qt:
            qt_desc, qt_problem = _qt_check(ui_check)
            report("qt", qt_desc)
            if qt_problem:
                problems.append(qt_problem)
    except GambitError as exc:  # an expected failure: its message says it all
        problems.append(f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        log.exception("self-test failed")
        problems.append(f"{type(exc).__name__}: {exc}")

    report("result", "PASS" if not problems else "FAIL: " + "; ".join(problems))
    saved = report.save()
    if saved is not None and out is not None:
        out(f"report: {saved}")
    return 0 if not problems else 1


def build_parser(prog: str = "gambit --self-test") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--target", type=Path, help="model to test (default: the embedded model)")
    p.add_argument("--draft", type=Path, help="also test speculation with this draft model")
    p.add_argument(
        "--tokens",
        type=int,
        default=DEFAULT_TOKENS,
        help=f"reply length (default {DEFAULT_TOKENS})",
    )
    add_setting_flag(p, "threads")
    p.add_argument("--ctx", type=int, default=1024, help="context size (default 1024)")
    p.add_argument(
        "--gpu-layers",
        type=int,
        default=None,
        help="layers on the GPU, -1 for all (default: all when the build can offload)",
    )
    p.add_argument("--no-qt", dest="qt", action="store_false", help="skip the Qt import check")
    p.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    started_at: float | None = None,
    ui_check: Callable[[], object] | None = None,
) -> int:
    """``python -m gambit.cli.selftest``; ``gambit --self-test`` lands here too,
    with ``ui_check``."""
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    return run_selftest(args, started_at=started_at, ui_check=ui_check)


def about_main() -> int:
    """``gambit --about``."""
    try:
        for line in about_lines():
            _stdout_line(line)
    except Exception as exc:
        _stdout_line(f"error: {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
