"""``gambit-worker``: lend this machine's memory and compute to a Gambit elsewhere.

It serves the GPUs (or, without one, the CPU) through llama.cpp's RPC
backend (``gambit.engine.machine.rpc``) and holds whatever layers of the target the
Gambit on the other machine places here. The protocol has no authentication
and no encryption, so it binds to 127.0.0.1 unless told otherwise; an SSH
tunnel is the safe way across a network (docs/multi-machine.md).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Sequence

from gambit.cli.setting_flags import add_setting_flag
from gambit.cli.stop_signals import StopSignals
from gambit.engine.machine import rpc
from gambit.engine.machine.devices import LocalDevice, served_devices
from gambit.engine.machine.threads import default_threads
from gambit.errors import GambitError
from gambit.storage import paths

SECURITY_NOTE = (
    "The RPC protocol has no authentication and no encryption: anyone who can "
    "reach this port can run code on this machine's memory. Bind to a network "
    "address only on a network you trust; across others, keep the default "
    "127.0.0.1 and use an SSH tunnel (ssh -L 50052:127.0.0.1:50052 this-machine)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gambit-worker",
        description="Serve this machine's GPUs (or its CPU) to a Gambit elsewhere, which "
        "places some of its target model's layers here (llama.cpp RPC).",
        epilog=SECURITY_NOTE,
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=_port_arg, default=rpc.DEFAULT_PORT, help="port (default 50052)"
    )
    add_setting_flag(parser, "threads")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="do not keep received weights on disk (by default large tensors are kept "
        "by hash, so loading the same model again sends them once)",
    )
    return parser


def _port_arg(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, not {text!r}")
    return int(text)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _check_port(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or None. llama.cpp's server only
    prints "Failed to create server socket" and returns."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def _announce(
    endpoint: str, threads: int, host: str, cache: str | None, devices: list[LocalDevice]
) -> None:
    gib = 1024**3
    print(f"Gambit worker listening on {endpoint}", flush=True)
    for d in devices:
        free, total = d.memory.free / gib, d.memory.total / gib
        print(f"  device : {d.description}: {free:.1f} GiB free of {total:.1f} GiB", flush=True)
    print(f"  threads: {threads}", flush=True)
    print(f"  cache  : {cache or 'off'}", flush=True)
    print(
        f"  in Gambit: Settings → Workers → Add ({endpoint}), or gambit-cli generate "
        f"--rpc {endpoint}"
    )
    if not _is_loopback(host):
        print(f"WARNING: {SECURITY_NOTE}", file=sys.stderr, flush=True)
    else:
        print("  only this machine can connect (use an SSH tunnel from another one)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not rpc.supported():
        print(f"gambit-worker: {rpc.NO_RPC_MESSAGE}", file=sys.stderr)
        return 2
    try:
        endpoint = rpc.parse_endpoint(f"{args.host}:{args.port}")
    except GambitError as exc:
        print(f"gambit-worker: {exc}", file=sys.stderr)
        return 2
    problem = _check_port(args.host, args.port)
    if problem:
        print(f"gambit-worker: {problem}", file=sys.stderr)
        return 2
    threads = args.threads or default_threads()
    cache = None if args.no_cache else str(paths.cache_dir() / "rpc")
    if cache:
        os.makedirs(cache, exist_ok=True)
    devices = served_devices()
    _announce(endpoint, threads, args.host, cache, devices)
    # llama.cpp's server loop never returns while it serves; it runs in a
    # thread so that Ctrl-C and SIGTERM reach the main thread and end it.
    server = threading.Thread(
        target=rpc.serve, args=(endpoint, threads, cache, devices), daemon=True
    )
    stop = threading.Event()
    with StopSignals(stop):
        server.start()
        while server.is_alive() and not stop.wait(0.2):
            pass
    sys.stdout.flush()
    if not stop.is_set():
        print(f"gambit-worker: the server at {endpoint} stopped", file=sys.stderr)
        return 1
    print("gambit-worker: stopped", flush=True)
    os._exit(0)  # the server thread is inside llama.cpp and cannot be joined


if __name__ == "__main__":
    sys.exit(main())
