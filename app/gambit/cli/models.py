"""``gambit-cli models ...``: the model library from the terminal."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gambit.cli.setting_flags import add_setting_flag
from gambit.cli.stop_signals import StopSignals
from gambit.engine.machine.limits import positive_int_arg
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.machine.threads import default_threads
from gambit.formats.gguf_info import ModelInfo, inspect_model
from gambit.formats.layerskip_file import LayerSkipCancelledError
from gambit.fsutil import Progress
from gambit.models.catalog import download, find_pair, load_catalog
from gambit.models.default_model import default_model_path
from gambit.models.derive import FTYPES, DeriveCancelledError, derive_draft, measure_acceptance
from gambit.models.derive_advice import (
    ASSUMED_ACCEPTANCE,
    MIN_SAVING,
    CostCurve,
    DeriveAdvice,
    advise,
    cached_curve,
)
from gambit.models.layerskip import (
    DEFAULT_MAX_EVALUATIONS,
    LayerSkipPlan,
    ensure_layer_skip_draft,
)
from gambit.models.library import LibraryEntry, ModelLibrary
from gambit.models.memory import MIB, available_memory, check_fits, estimate_memory
from gambit.models.pairing import drafts_through_text, pair_report
from gambit.storage.paths import cache_dir


def add_models_parser(sub: Any) -> None:
    """Add ``models`` and its commands to the CLI's subparsers."""
    models = sub.add_parser("models", help="the model library: list, inspect, pair, derive, ...")
    msub = models.add_subparsers(dest="models_command", required=True)

    p = msub.add_parser("list", help="rescan the library and list its models")
    p.add_argument(
        "--folder",
        type=Path,
        action="append",
        default=[],
        help="add this folder to the library (remembered) before listing; repeatable",
    )

    p = msub.add_parser("inspect", help="a model file's metadata and memory estimate")
    p.add_argument("path", type=Path, help=f"a .gguf file, or {DEFAULT_NAME!r}: the embedded model")
    add_setting_flag(
        p, "context_size", help="context for the memory estimate (default %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")

    p = msub.add_parser("pair", help="can DRAFT draft for TARGET? (exit 1 if not)")
    p.add_argument("target", type=Path)
    p.add_argument("draft", type=Path)
    add_setting_flag(p, "context_size", help="context for the memory check (default %(default)s)")

    p = msub.add_parser(
        "derive",
        help="re-quantize TARGET into a draft for it (without --type: which types pay)",
        description="Re-quantize TARGET into a draft for it. Without --type, list the "
        "quantizations meaningfully cheaper than TARGET with their estimated gain, and why "
        "the others are left out.",
    )
    p.add_argument("target", type=Path)
    p.add_argument("--type", dest="ftype", default=None, choices=list(FTYPES))
    p.add_argument(
        "--anyway",
        action="store_true",
        help="derive --type even if it is not meaningfully cheaper than TARGET",
    )
    p.add_argument("--out", type=Path, default=None, help="output file (default: models folder)")
    p.add_argument("--measure", action="store_true", help="measure the acceptance rate afterwards")
    add_setting_flag(p, "threads", help="CPU threads for --measure (default 0: the cores)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")

    p = msub.add_parser(
        "layerskip",
        help="derive a draft that skips some of TARGET's blocks (self-speculation)",
        description="Find, by measuring on calibration prompts, which blocks of TARGET to "
        "skip for the best expected speedup, and write that draft into the models folder "
        "(cached per target file).",
    )
    p.add_argument("target", type=Path)
    p.add_argument(
        "--max-evals",
        type=positive_int_arg,
        default=DEFAULT_MAX_EVALUATIONS,
        help=f"skip sets to measure at most (default {DEFAULT_MAX_EVALUATIONS})",
    )
    add_setting_flag(p, "threads")
    p.add_argument("--force", action="store_true", help="search again, even if cached")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")

    p = msub.add_parser("import", help="add a model file to the library")
    p.add_argument("path", type=Path)
    p.add_argument("--copy", action="store_true", help="copy it into the models folder")

    p = msub.add_parser("remove", help="remove a model from the library")
    p.add_argument("path", type=Path)
    p.add_argument(
        "--delete-file",
        action="store_true",
        help="also delete the file, if Gambit put it in its models folder",
    )

    msub.add_parser("catalog", help="known good target/draft pairs")

    p = msub.add_parser("download", help="download a catalog pair from Hugging Face")
    p.add_argument("name")
    p.add_argument("--only", choices=["target", "draft"], default=None)


def run_models(args: argparse.Namespace) -> int:
    command = args.models_command
    handler = _COMMANDS[command]
    return handler(args)


# --------------------------------------------------------------------- helpers


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e7 else f"{n / 1e6:,.1f} MB"


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _progress(verb: str) -> Progress:
    live = sys.stderr.isatty()
    step = 1 if live else 25  # a log gets a line per quarter
    shown: dict[str, int] = {}  # stage -> the last percentage shown

    def report(stage: str, done: int, total: int) -> None:
        pct = min(100, int(100 * done / total)) if total else 0
        last = shown.get(stage)
        if last is not None and (pct == last or (pct < 100 and pct // step == last // step)):
            return
        shown[stage] = pct
        end = "\n" if pct >= 100 or not live else "\r"
        print(f"{verb}: {stage} {pct:3d}% of {_mb(total)}", end=end, file=sys.stderr, flush=True)

    return report


def _library() -> ModelLibrary:
    """The library, its notices (a damaged index set aside) shown on stderr."""
    library = ModelLibrary()
    for notice in library.notices:
        print(f"gambit-cli: warning: {notice}", file=sys.stderr)
    return library


def _entry_row(e: LibraryEntry, names: dict[str, str]) -> list[str]:
    i = e.info
    return [
        e.path.name,
        i.architecture,
        i.params_label,
        i.quantization,
        _mb(i.file_size),
        f"{i.context_length:,}",
        f"{i.vocab_size:,} {i.vocab_type}",
        "yes" if i.has_chat_template else "no",
        e.origin,
        ", ".join(names.get(t, Path(t).name) for t in e.draft_for) or "-",
        str(e.path.parent),
    ]


# -------------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    library = _library()
    for folder in args.folder:
        library.add_folder(folder)
    library.rescan()
    entries = library.entries()
    bad = {p.path for p in library.problems()}
    good = [e for e in entries if e.path not in bad]
    names = {str(e.path): e.path.name for e in entries}
    if good:
        headers = [
            "FILE", "ARCH", "PARAMS", "QUANT", "SIZE", "CONTEXT", "VOCAB", "TEMPLATE",
            "ORIGIN", "DRAFT FOR", "FOLDER",
        ]  # fmt: skip
        print(_table(headers, [_entry_row(e, names) for e in good]))
    else:
        print(f"No models yet. Put GGUF files in {library.models_dir}, or use "
              "`gambit-cli models import PATH`.")  # fmt: skip
    problems = library.problems()
    if problems:
        print(f"\n{len(problems)} file(s) cannot be used:")
        for p in problems:
            print(f"  {p.message}")
    print(f"\nmodels folder: {library.models_dir}")
    for folder in library.folders():
        print(f"added folder:  {folder}")
    return 0


def _info_lines(info: ModelInfo, n_ctx: int) -> list[tuple[str, str]]:
    heads = f"{info.head_count} ({info.head_count_kv} for K/V), head size {info.key_length}"
    est = estimate_memory(info, n_ctx)
    memory = (
        f"about {_mib(est.total_bytes)} at {n_ctx:,} tokens of context "
        f"(weights {_mib(est.weights_bytes)}, KV cache {_mib(est.kv_bytes)} Q8_0, "
        f"compute {_mib(est.compute_bytes)}, other {_mib(est.overhead_bytes)}); "
        f"{_mib(available_memory())} available"
    )
    return [
        ("file", str(info.path)),
        ("name", info.name),
        ("architecture", info.architecture),
        ("parameters", f"{info.params_label} ({info.n_params:,})"),
        ("quantization", info.quantization),
        ("file size", f"{_mb(info.file_size)} ({info.file_size:,} bytes)"),
        (
            "vocabulary",
            f"{info.vocab_size:,} tokens, {info.vocab_type} ({info.vocab_type_name})"
            + (f", pre-tokenizer {info.tokenizer_pre}" if info.tokenizer_pre else ""),
        ),
        ("context length", f"{info.context_length:,} (trained)"),
        ("blocks", str(info.block_count)),
        ("embedding", f"{info.embedding_length:,}"),
        ("attention heads", heads),
        ("chat template", "yes" if info.has_chat_template else "no"),
        ("tokenizer", info.tokenizer_digest),
        ("memory", memory),
    ]


DEFAULT_NAME = "default"  # ``models inspect default``: the embedded default model


def _model_arg(path: Path) -> Path:
    """``path``, or the embedded default model's file for ``default`` (when no
    file of that name is here), fetched into the models folder if need be."""
    if str(path) == DEFAULT_NAME and not path.exists():
        return default_model_path(progress=_progress("fetching the default model"))
    return path


def cmd_inspect(args: argparse.Namespace) -> int:
    info = inspect_model(_model_arg(args.path))
    if args.json:
        data = info.to_json()
        est = estimate_memory(info, args.ctx)
        data["memory"] = {
            "n_ctx": args.ctx,
            "weights_bytes": est.weights_bytes,
            "kv_bytes": est.kv_bytes,
            "compute_bytes": est.compute_bytes,
            "overhead_bytes": est.overhead_bytes,
            "total_bytes": est.total_bytes,
        }
        print(json.dumps(data, indent=1))
        return 0
    lines = _info_lines(info, args.ctx)
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key.ljust(width)}  {value}")
    warning = check_fits(info, None, args.ctx)
    if warning:
        print(f"warning: {warning}")
    return 0


def cmd_pair(args: argparse.Namespace) -> int:
    target, draft = inspect_model(args.target), inspect_model(args.draft)
    report = pair_report(target, draft)
    print(f"target: {target.path.name} ({target.params_label}, {target.quantization}, "
          f"{_mb(target.file_size)})")  # fmt: skip
    print(f"draft:  {draft.path.name} ({draft.params_label}, {draft.quantization}, "
          f"{_mb(draft.file_size)})")  # fmt: skip
    if report.compatible and report.through_text:
        print("compatible: yes, through text (the tokenizers differ, so the draft's text is "
              "tokenized again for the target every round)")  # fmt: skip
        for difference in report.differences:
            print(f"  - {difference}")
    elif report.compatible:
        print("compatible: yes (the draft uses the target's tokenizer)")
    else:
        print("compatible: no")
        for reason in report.reasons:
            print(f"  - {reason}")
    for note in report.notes:
        print(f"note: {note}")
    if report.compatible:
        warning = check_fits(target, draft, args.ctx)
        if warning:
            print(f"warning: {warning}")
    return 0 if report.compatible else 1


def cmd_derive(args: argparse.Namespace) -> int:
    advice = advise(args.target, _cached_curve(args.target))
    if args.ftype is None:
        print(_advice_text(advice))
        return 0
    option = advice.option(args.ftype)
    if option is not None and not option.offered and not args.anyway:
        print(
            f"gambit-cli: {args.ftype} is not worth deriving as a draft of "
            f"{Path(args.target).name}: {option.why_not}. A draft must read at least "
            f"{MIN_SAVING * 100:.0f} % fewer bytes per token than its target to pay. "
            "See `gambit-cli models derive TARGET` for the types that do, or add --anyway.",
            file=sys.stderr,
        )
        return 2
    if option is not None and option.offered:
        print(f"estimate: {option.estimate()} {advice.curve.source}")
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    t0 = time.perf_counter()
    try:
        path = derive_draft(
            args.target,
            args.ftype,
            dest=args.out,
            progress=_progress("deriving"),
            cancel=cancel,
            overwrite=args.force,
        )
    except DeriveCancelledError as exc:
        print(f"gambit-cli: {exc}", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
    elapsed = time.perf_counter() - t0
    size = path.stat().st_size
    print(f"derived {path} ({args.ftype}, {_mb(size)}) in {elapsed:.1f} s")
    print(f"registered as a draft for {Path(args.target).name}")
    if args.measure:
        t1 = time.perf_counter()
        options = RuntimeOptions(n_ctx=512, n_threads=args.threads)
        rate = measure_acceptance(args.target, path, options=options)
        print(f"acceptance: {rate:.1%} (greedy, γ = 4, calibration prompts; "
              f"{time.perf_counter() - t1:.1f} s)")  # fmt: skip
    return 0


def _cached_curve(target: Path) -> CostCurve | None:
    """The target's verification cost if the engine measured it here (default settings)."""
    try:
        return cached_curve(Path(target).expanduser(), n_threads=default_threads(),
                            cache_dir=cache_dir())  # fmt: skip
    except OSError:
        return None  # (advise says what is wrong with the file)


def _advice_text(advice: DeriveAdvice) -> str:
    read = _mib(advice.target_read_bytes)
    lines = [f"{advice.target.name}: {advice.target_type}, {read} of weights read per token"]
    rows = [
        [o.ftype, f"about {_mib(o.file_bytes)}", f"{(1 - o.read_ratio) * 100:.0f} %",
         f"{o.ceiling:.2f}x", f"{o.break_even:.0%}" if o.break_even is not None else "never",
         f"{o.at_assumed:.2f}x"]
        for o in advice.offered
    ]  # fmt: skip
    if rows:
        headers = ["type", "file", "fewer bytes/token", "at most", "pays from"]
        headers.append(f"at {ASSUMED_ACCEPTANCE:.0%} accepted")
        lines += [
            "Drafts worth deriving (estimates; measure after deriving):",
            _table(headers, rows),
            "at most: if every guess were accepted; pays from: the acceptance it needs to "
            "beat plain decoding. A draft step is assumed to cost its share of the bytes "
            "read per token.",
            advice.curve.source,
            f"Derive one with: gambit-cli models derive {advice.target} --type {rows[0][0]}",
        ]
    else:
        lines.append(
            "No quantization is meaningfully cheaper than this model, so none is offered as "
            "a draft: import a smaller model of the same family, or use prompt lookup."
        )
    if advice.missing():
        lines.append(advice.missing())
    return "\n".join(lines)


def _stage_progress() -> Progress:
    """One line per stage change (and a live percentage on a terminal)."""
    live = sys.stderr.isatty()
    last = [""]

    def report(stage: str, done: int, total: int) -> None:
        if live:
            pct = min(100, int(100 * done / total)) if total else 100
            print(f"\r\033[Klayerskip: {stage} ({pct}%)", end="", file=sys.stderr, flush=True)
        elif stage != last[0]:
            print(f"layerskip: {stage}", file=sys.stderr, flush=True)
        last[0] = stage

    return report


def _plan_table(plan: LayerSkipPlan) -> str:
    rows = []
    for c in plan.candidates:
        mark = "*" if c.skipped == plan.skipped else ""
        rows.append(
            [
                mark + (", ".join(map(str, c.skipped)) or "-"),
                f"{plan.source_blocks - len(c.skipped)}/{plan.source_blocks}",
                f"{c.acceptance:.1%}",
                f"{c.draft_cost_ratio:.2f} ({c.measured_cost_ratio:.2f})",
                str(c.best_gamma),
                f"{c.expected_speedup:.2f}x",
                c.stage,
            ]
        )
    headers = ["SKIPPED", "KEPT", "ACCEPTANCE", "COST (MEASURED)", "BEST γ", "EXPECTED", "STAGE"]
    return _table(headers, rows)


def cmd_layerskip(args: argparse.Namespace) -> int:
    cancel = threading.Event()
    # Ctrl-C or SIGTERM: the search stops at its next step and deletes its copies.
    stop = StopSignals(cancel).install()
    try:
        result = ensure_layer_skip_draft(
            args.target,
            progress=None if args.json else _stage_progress(),
            cancel=cancel,
            options=RuntimeOptions(n_threads=args.threads),
            force=args.force,
            max_evaluations=args.max_evals,
        )
    except LayerSkipCancelledError as exc:
        if sys.stderr.isatty():
            print(file=sys.stderr)
        print(f"gambit-cli: {exc}", file=sys.stderr)
        return stop.exit_code
    finally:
        stop.restore()
    if sys.stderr.isatty() and not args.json:
        print(file=sys.stderr)  # end the live progress line
    plan = result.plan
    if args.json:
        data = {"path": str(result.path), "from_cache": result.from_cache, "plan": plan.to_json()}
        print(json.dumps(data, indent=1))
        return 0
    print(_plan_table(plan))
    print(
        f"\n{len(plan.candidates)} skip sets measured on {plan.n_positions} tokens of the "
        f"target's own text in {plan.search_seconds:.0f} s; * = chosen. COST: a draft step "
        "in target steps, fitted to all timings (this set's own in brackets), against "
        f"copies of the target that skip nothing (measured {plan.control_cost_ratio:.2f}x "
        "the loaded target)"
    )
    print(f"chosen: {plan.summary()}")
    how = "cached, from an earlier search" if result.from_cache else "written"
    print(f"draft: {result.path} ({how}; registered as a draft for {Path(args.target).name})")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    library = _library()
    progress = _progress("importing") if args.copy else None
    info = library.import_file(args.path, copy=args.copy, progress=progress)
    entry = library.get(info.path)
    origin = entry.origin if entry is not None else "referenced"
    how = {
        "copied": "copied into the library",
        # --copy of a file in the models folder already: it stays the user's
        "folder": "already in the models folder; added to the library",
    }.get(origin, f"added to the library ({origin})")
    print(f"{info.path}: {how}: {info.architecture}, {info.params_label}, "
          f"{info.quantization}, {_mb(info.file_size)}")  # fmt: skip
    drafts = library.drafts_for(info)
    if drafts:
        names = [
            d.path.name + (" (through text)" if drafts_through_text(info, d) else "")
            for d in drafts
        ]
        print(f"compatible drafts in the library: {', '.join(names)} "
              f"(suggested: {drafts[0].path.name})")  # fmt: skip
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    library = _library()
    deleted = library.remove(args.path, delete_file=args.delete_file)
    if deleted is not None:
        print(f"removed from the library and deleted: {deleted}")
    else:
        print(f"removed from the library: {args.path} (the file was left in place)")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    pairs = load_catalog()
    rows = [
        [
            p.name,
            f"{p.target.filename} ({p.target.params}, ~{p.target.size_mb:,} MB)",
            f"{p.draft.filename} ({p.draft.params}, ~{p.draft.size_mb:,} MB)",
            "yes" if p.verified else "no",
        ]
        for p in pairs
    ]
    print(_table(["NAME", "TARGET", "DRAFT", "VERIFIED"], rows))
    print("\nSources on Hugging Face:")
    for p in pairs:
        print(f"  {p.name}: {p.target.repo}, {p.draft.repo}")
    print("\nDownload a pair with `gambit-cli models download NAME`.")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    pair = find_pair(args.name)
    paths = download(pair, progress=_progress("downloading"), which=args.only or "both")
    for path in paths:
        print(f"downloaded {path}")
    return 0


_COMMANDS = {
    "list": cmd_list,
    "inspect": cmd_inspect,
    "pair": cmd_pair,
    "derive": cmd_derive,
    "layerskip": cmd_layerskip,
    "import": cmd_import,
    "remove": cmd_remove,
    "catalog": cmd_catalog,
    "download": cmd_download,
}
