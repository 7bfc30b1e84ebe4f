"""``gambit-cli serve``: the loaded models behind an OpenAI-compatible API."""

from __future__ import annotations

import argparse
import sys
import threading

from gambit.cli.setting_flags import add_setting_flags
from gambit.cli.stop_signals import StopSignals
from gambit.engine.session import Engine
from gambit.engine.verification.sampling import SamplingParams


def add_serve_args(p: argparse.ArgumentParser) -> None:
    add_setting_flags(p, "server_host", "server_port", "server_api_key")
    p.add_argument(
        "--policy",
        choices=["adaptive", "fixed"],
        default="adaptive",
        help="how γ is chosen, as in the window's Settings: adaptive (measured) or fixed "
        "(--gamma) (default adaptive)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        help="allow browser pages from this origin (repeat for more; default: none)",
    )
    p.add_argument(
        "--queue-max",
        type=int,
        default=4,
        help="requests running or waiting at once; more get 429 (default 4)",
    )


def serve(engine: Engine, args: argparse.Namespace, defaults: SamplingParams) -> int:
    """Serve ``engine`` until Ctrl-C or SIGTERM; the engine is closed after."""
    # Here, not at the top: the web stack loads only for this command.
    from gambit.serve.jobs import ThreadHost, model_name
    from gambit.serve.openai_api import ServeOptions, create_app
    from gambit.serve.prometheus import ServeMetrics
    from gambit.serve.server import LocalServer

    name = model_name(engine.config.target.name)
    host = ThreadHost(engine, name)
    options = ServeOptions(
        api_key=args.api_key or None,
        cors_origins=tuple(args.cors_origin),
        queue_max=max(1, args.queue_max),
        defaults=defaults,
        max_tokens=args.max_tokens,
    )
    try:
        server = LocalServer(create_app(host, options, ServeMetrics()), args.host, args.port)
        print(
            f"gambit-cli: serving {name} at {server.base_url}"
            + (" (API key required)" if options.api_key else "")
            + "; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        # uvicorn takes Ctrl-C and SIGTERM while it runs (a graceful shutdown)
        # and raises them again after; here they end the server, as asked.
        with StopSignals(threading.Event()):
            server.run()
    finally:
        host.close()
    print("gambit-cli: server stopped", file=sys.stderr)
    return 0
