"""``gambit-cli``: generate and bench from the terminal, on the same engine as the app."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from gambit import __version__
from gambit.bench import (
    run_bench,
    run_history_cli,
    run_load_cli,
    run_playback_cli,
    run_regimes_cli,
    run_reuse_cli,
    run_served_bench,
    run_structured_cli,
)
from gambit.cli.bench_args import add_regimes_args
from gambit.cli.chats import add_chats_parser, run_chats
from gambit.cli.models import add_models_parser, run_models
from gambit.cli.reply_shape import add_shape_args, reply_grammar
from gambit.cli.serve import add_serve_args, serve
from gambit.cli.setting_flags import add_setting_flags, dest, settings_from_args
from gambit.cli.stop_signals import StopSignals
from gambit.engine.drafters.registry import DRAFTERS, DrafterSpec, combined_kind
from gambit.engine.gamma.metrics import (
    NO_FIGURE,
    MetricsSnapshot,
    MetricsTracker,
    format_accepted,
    format_rate,
    format_speedup,
)
from gambit.engine.machine import rpc
from gambit.engine.machine.busy import LoadMeter
from gambit.engine.machine.limits import positive_int_arg
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.grammar import GrammarError
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError, OperationCancelledError
from gambit.fsutil import NO_COUNTS, Progress
from gambit.models.default_model import default_model_path
from gambit.models.drafter_files import resolve_drafter_file
from gambit.storage.paths import resources_dir
from gambit.storage.settings import Settings


def _add_model_args(p: argparse.ArgumentParser, target_required: bool = False) -> None:
    p.add_argument(
        "--target",
        type=Path,
        required=target_required,
        help="target GGUF model (default: the embedded SmolLM2-135M-Instruct)",
    )
    # One flag per drafter kind, in the registry's order; flags go together only
    # where a drafter combines them (--draft FILE --lookup: chosen_drafter).
    for drafter in DRAFTERS.values():
        if drafter.cli_flag is None:
            continue
        if drafter.file == "chosen":
            p.add_argument(drafter.cli_flag, type=Path, help=drafter.cli_help)
        else:
            p.add_argument(drafter.cli_flag, action="store_true", help=drafter.cli_help)
    add_setting_flags(
        p, "tree_drafts", "tree_nodes", "fixed_gamma", "gamma_max", "threads", "context_size",
        "gpu_layers_target", "exact_kernels", "rpc_workers", "worker_layers",
    )  # fmt: skip


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    add_setting_flags(
        p, "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed", "max_tokens"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gambit-cli",
        description="Local LLM generation with speculative decoding that shows whether it pays.",
        epilog="Checking an installation: gambit-cli --self-test [options] checks the model, "
        "the backend and speculation and exits 0 or 1 (add --help for its options; the app's "
        "gambit --self-test checks its window too); gambit-cli --about prints the version "
        "and backend.",
    )
    parser.add_argument("--version", action="version", version=f"gambit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_generate_parser(sub)
    _add_bench_parser(sub)
    add_models_parser(sub)
    add_chats_parser(sub)
    serve = sub.add_parser(
        "serve", help="serve the models over an OpenAI-compatible API (docs: README)"
    )
    _add_model_args(serve)
    _add_sampling_args(serve)
    add_serve_args(serve)
    return parser


def _add_generate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gen = sub.add_parser("generate", help="stream a reply to one prompt")
    _add_model_args(gen)
    _add_sampling_args(gen)
    gen.add_argument(
        "--raw",
        action="store_true",
        help="plain completion of PROMPT (no chat template; for base models)",
    )
    gen.add_argument("--system", default=None, help="system message")
    add_shape_args(gen)
    gen.add_argument(
        "--policy",
        choices=["adaptive", "fixed", "off"],
        default="adaptive",
        help="how γ is chosen: adaptive (measured), fixed (--gamma) or off",
    )
    gen.add_argument("prompt", help="the user message")


def _add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="target-only vs speculative on a prompt suite")
    _add_model_args(bench)
    _add_sampling_args(bench)
    # The bench compares policies greedily, on short replies, unless told otherwise.
    bench.set_defaults(**{dest("temperature"): 0.0, dest("max_tokens"): 128})
    bench.add_argument(
        "--prompts",
        type=Path,
        help='JSON Lines file: {"prompt": ..., "suite": ...} per line (default with '
        "--regimes: the bundled chat, grounded and code suites)",
    )
    add_regimes_args(bench)
    bench.add_argument(
        "--raw",
        action="store_true",
        help="plain completion of each prompt (no chat template; for base models, with "
        "--regimes default the bundled raw.jsonl suites)",
    )
    bench.add_argument(
        "--reuse",
        action="store_true",
        help="what prompt lookup's memory of earlier chats is worth: replays a user's history "
        "in order (--prompts, default the bundled reuse.jsonl), each new request target-only, "
        "with lookup alone and with lookup and the memory (needs --lookup)",
    )
    bench.add_argument(
        "--structured",
        action="store_true",
        help="replies constrained to a JSON schema (--prompts, default the bundled "
        "structured.jsonl: extraction, tool calls, lists), target-only free and constrained, "
        "the grammar drafting, the drafter alone and both",
    )
    bench.add_argument(
        "--load",
        metavar="LOAD[,LOAD]",
        help="under a background load (none; busy: a core busy; duty=N: busy N %% of the "
        "time), each prompt with automatic threads and each fixed count, target-only and "
        "adaptive (needs --prompts)",
    )
    bench.add_argument(
        "--through-server",
        action="store_true",
        help="the prompts directly and through the local OpenAI-compatible server, "
        "alternately: what the server costs per token",
    )
    history = bench.add_argument_group(
        "history",
        "--from-history replays your stored conversations instead of a prompts file: each "
        "user turn, with the conversation before it, target-only and with each drafter the "
        "models allow (prompt lookup, and --draft or --layer-skip; trees with --tree) under "
        "each --policy, greedily; saved under the data folder (docs/measure.md)",
    )
    history.add_argument("--from-history", action="store_true", help="measure on your own chats")
    history.add_argument(
        "--last",
        type=positive_int_arg,
        default=20,
        help="with --from-history, the latest N user turns (default 20)",
    )
    bench.add_argument("--limit", type=int, default=0, help="use the first N prompts only")
    bench.add_argument("--repeat", type=int, default=1, help="run each prompt N times")
    bench.add_argument("--json", action="store_true", help="print the report as JSON")
    bench.add_argument(
        "--policy",
        action="append",
        metavar="POLICY",
        help="a speculation policy to compare with target-only: adaptive, off, fixed "
        "(γ = --gamma) or fixed=N (repeatable; default: adaptive, fixed and off)",
    )


def chosen_drafter(args: argparse.Namespace) -> DrafterSpec:
    """The drafter whose flag was given, or the one that combines the flags
    given (``--draft FILE --lookup``); none without. Other flags together are
    a GambitError that names them."""
    given = [
        d for d in DRAFTERS.values() if d.cli_dest is not None and getattr(args, d.cli_dest, None)
    ]
    if not given:
        return DRAFTERS["none"]
    if len(given) == 1:
        return given[0]
    combined = combined_kind({d.kind for d in given})
    if combined is None:
        flags = " and ".join(str(d.cli_flag) for d in given)
        raise GambitError(f"{flags} cannot be used together (--draft and --lookup can)")
    return combined


def cli_settings(args: argparse.Namespace) -> Settings:
    """The parsed flags as ``Settings`` (the defaults where a command has no
    flag): the one mapping from flags to the engine's records."""
    settings = settings_from_args(args)
    # --gpu-layers offloads the draft's layers as the target's (the window
    # sets them apart); --gamma past --gamma-max raises the ceiling with it.
    return settings.with_(
        gpu_layers_draft=settings.gpu_layers_target,
        gamma_max=max(settings.gamma_max, settings.fixed_gamma),
    )


def rpc_workers(settings: Settings) -> tuple[str, ...]:
    """The workers of ``--rpc``, each checked and asked for its memory now, so that
    a bad or unreachable one costs one line before any model loads."""
    workers = settings.target_options().rpc_workers
    if workers and not rpc.supported():
        raise GambitError(rpc.NO_RPC_MESSAGE)
    for endpoint in workers:
        rpc.probe(endpoint)  # RpcWorkerError: the reason, naming the worker
    return workers


def _engine_config(args: argparse.Namespace, cancel: threading.Event | None = None) -> EngineConfig:
    settings = cli_settings(args)
    rpc_workers(settings)
    target = args.target
    if target is None:
        target = default_model_path(progress=_stderr_progress())
    drafter = chosen_drafter(args)
    settings = settings.with_(
        drafter=drafter.kind, draft_model=str(args.draft) if args.draft is not None else ""
    )
    draft = resolve_drafter_file(
        drafter.kind,
        target,
        chosen=args.draft,
        progress=_stderr_progress,
        options=settings.draft_options(),  # (a derivation runs the target here)
        cancel=cancel,
    ).path
    config = settings.engine_config(target, layer_skip_draft=draft)
    # generate's --policy has "off" too, serve's the window's two; bench and
    # its measurements choose theirs per run.
    if args.command in ("generate", "serve"):
        config = dataclasses.replace(config, policy=args.policy)
    return config


def _sampling(args: argparse.Namespace) -> SamplingParams:
    return cli_settings(args).generation_config().sampling


def _stderr_progress(what: str = "Preparing the default model") -> Progress:
    """Progress on stderr: a live line on a terminal, one line per stage otherwise."""
    live = sys.stderr.isatty()
    state = {"stage": "", "shown": -1}

    def report(stage: str, done: int, total: int) -> None:
        if total == NO_COUNTS:  # pip's download: no byte counts, no stuck "0%"
            state["stage"], state["shown"] = stage, -1
            print(f"{what}: {stage} (no progress reported)…", file=sys.stderr, flush=True)
            return
        pct = int(100 * done / total) if total else 100
        if not live and stage == state["stage"] and pct < 100:
            return
        if stage == state["stage"] and pct == state["shown"]:
            return
        state["stage"], state["shown"] = stage, pct
        end = "\n" if pct >= 100 or not live else "\r"
        size = f" of {total / 1e6:.0f} MB" if total > 10_000 else ""  # bytes, or steps
        print(
            f"{what}: {stage} {pct:3d}%{size}",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return report


def _refuse_empty_prompt(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """As the window refuses an empty message, a chat needs one (exit 2); --raw
    may continue from nothing, as a base model can."""
    if args.command == "generate" and not args.raw and not args.prompt.strip():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["generate"].error(
            "the prompt is empty: write the message to reply to "
            "(--raw completes any text, even none)"
        )


def cmd_generate(args: argparse.Namespace) -> int:
    cancel = threading.Event()
    # Ctrl-C or SIGTERM stops the reply at the next round, or the layer-skip
    # search (--layer-skip) at its next step, which then deletes its copies.
    signals = StopSignals(cancel).install()
    grammar = reply_grammar(args)
    with _Closing(Engine(_engine_config(args, cancel))) as engine:
        config = GenerationConfig(args.max_tokens, _sampling(args), grammar=grammar)
        d0 = engine.decode_seconds
        if args.raw:
            rounds = engine.complete(args.prompt, config, cancel)
        else:
            messages = [Message("system", args.system)] if args.system else []
            messages.append(Message("user", args.prompt))
            rounds = engine.chat(messages, config, cancel)
        tracker = MetricsTracker()
        stop = None
        load = LoadMeter()
        for rnd in rounds:
            sys.stdout.write(rnd.text)
            sys.stdout.flush()
            tracker.add(rnd)
            stop = rnd.stop
        sys.stdout.write("\n")
        reading = load.read()
        tracker.stats.decode_s = engine.decode_seconds - d0
        baseline = engine.finish_reply(tracker.stats)  # plain decoding on this reply's context
        busy = reading.describe() if reading.busy else None
        snap = engine.snapshot(tracker, baseline, busy=busy)
        print(_stats_line(engine, snap, stop.value if stop else "?"), file=sys.stderr)
    return signals.exit_code if cancel.is_set() else 0


def _stats_line(engine: Engine, s: MetricsSnapshot, stop: str) -> str:
    return summary_line(
        s,
        drafter=engine.drafter.name if engine.drafter else None,
        detail=engine.drafter_detail,
        reason=engine.decision.reason,
        stop=stop,
    )


def summary_line(
    s: MetricsSnapshot, *, drafter: str | None, detail: str | None, reason: str, stop: str
) -> str:
    """The reply's figures as the window shows them (``gambit.engine.gamma.metrics``):
    the speedup is the measured one; the controller's is labelled an expectation."""
    parts = [f"[{drafter or 'target only'}]", f"{s.n_tokens} tokens", format_rate(s.tokens_per_s)]
    if drafter:
        if s.speedup_withheld is not None:
            parts.append(f"speedup {NO_FIGURE} ({s.speedup_withheld})")
        elif s.speedup is None:
            parts.append(f"speedup {NO_FIGURE} (nothing drafted)")
        else:
            parts.append(
                f"speedup {format_speedup(s.speedup)} measured "
                f"(plain decoding here: {format_rate(s.baseline_tokens_per_s)})"
            )
    parts += [f"ttft {s.ttft_ms:.0f} ms", f"p99 {s.p99_ms:.1f} ms"]
    if drafter:
        parts += [
            format_accepted(s.n_accepted, s.n_drafted, dict(s.accepted_by_drafter)),
            f"{s.tokens_per_round:.2f} tok/round",
            f"controller: {reason}",
        ]
        if detail:
            parts.insert(1, detail)
    if s.threads:
        parts.append(f"threads: {s.threads}")
    if s.busy:
        parts.append(f"timed while the machine was busy ({s.busy})")
    parts.append(f"stop: {stop}")
    return " | ".join(parts)


def cmd_serve(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"gambit-cli: {line}", file=sys.stderr, flush=True)

    engine = Engine(_engine_config(args), say)
    with _Closing(engine):
        return serve(engine, args, _sampling(args))


def _run_bench(args: argparse.Namespace) -> int:
    if args.playback_from:
        return run_playback_cli(args)
    if args.regimes:
        if args.rpc:
            raise GambitError("--regimes runs on this machine only: leave out --rpc")

        if args.prompts is None:
            args.prompts = _bundled_prompts("raw.jsonl" if args.raw else "all.jsonl")
        source = args.target or default_model_path(progress=_stderr_progress())
        options = cli_settings(args).target_options()  # (no workers: refused above)
        return run_regimes_cli(args, source, options, _sampling(args))
    if args.from_history:
        return run_history_cli(args, lambda: _engine_config(args))
    if args.reuse:
        suite = args.prompts or _bundled_prompts("reuse.jsonl")
        cancel = threading.Event()
        with StopSignals(cancel):
            return run_reuse_cli(args, _engine_config(args, cancel), _sampling(args), suite, cancel)
    if args.structured:
        cancel = threading.Event()
        with StopSignals(cancel):
            suite = args.prompts or _bundled_prompts("structured.jsonl")
            return run_structured_cli(
                args, _engine_config(args, cancel), _sampling(args), suite, cancel
            )
    if args.prompts is None:
        raise GambitError("bench needs --prompts FILE (or --regimes, or --from-history)")
    if args.through_server:
        return run_served_bench(args, _engine_config(args), _sampling(args))
    if args.load:
        cancel = threading.Event()
        with StopSignals(cancel):
            return run_load_cli(args, _engine_config(args, cancel), _sampling(args), cancel)
    # Ctrl-C sets an event that the bench checks between runs. A KeyboardInterrupt
    # could be lost: raised inside a ctypes callback (llama.cpp's log, while a
    # model loads), it is printed and dropped, and the bench ran on (seen in CI).
    cancel = threading.Event()
    with StopSignals(cancel):
        return run_bench(args, _engine_config(args, cancel), _sampling(args), cancel)


def _bundled_prompts(name: str) -> Path:
    folder = resources_dir()
    if folder is None:
        raise GambitError("the bundled prompt suites are missing: pass --prompts")
    return folder / "prompts" / name


class _Closing:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __enter__(self) -> Engine:
        return self.engine

    def __exit__(self, *exc: object) -> None:
        self.engine.close()


def _app_mode(args_in: list[str]) -> int | None:
    """The app's terminal modes, which gambit-cli answers too (its help's
    epilog): the self-test (of Qt, without importing the window: the app's own
    ``gambit --self-test`` checks that too) and --about; None for a command."""
    if args_in[:1] == ["--self-test"]:
        from gambit.cli.selftest import main as selftest_main
        from gambit.logs import install_crash_handler

        install_crash_handler()
        return selftest_main(args_in[1:])
    if args_in[:1] == ["--about"]:
        from gambit.cli.selftest import about_main

        return about_main()
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    answered = _app_mode(args_in)
    if answered is not None:
        return answered
    parser = build_parser()
    args = parser.parse_args(args_in)
    _refuse_empty_prompt(parser, args)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("gambit.llama").setLevel(logging.ERROR)
    try:
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "bench":
            return _run_bench(args)
        if args.command == "models":
            return run_models(args)
        if args.command == "chats":
            return run_chats(args)
        if args.command == "serve":
            return cmd_serve(args)
    except OperationCancelledError as exc:  # a layer-skip search stopped by Ctrl-C
        print(f"gambit-cli: {exc}", file=sys.stderr)
        return 130
    except GambitError as exc:
        print(f"gambit-cli: error: {exc}", file=sys.stderr)
        return 2
    except GrammarError as exc:  # (--json-schema)
        print(f"gambit-cli: error: the JSON schema cannot be used: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"gambit-cli: invalid setting: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gambit-cli: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as other tools do on SIGPIPE,
        # with stdout on /dev/null so that Python's flush at exit cannot complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    parser.error(f"unknown command {args.command}")
