"""Running the API: uvicorn on a socket Gambit binds itself, in the foreground
(``gambit-cli serve``: Ctrl-C ends it cleanly) or on a thread (the window).

The socket is bound before uvicorn starts, so a port in use or a host that
cannot be bound is a ``GambitError`` that says so, not a stopped thread.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette

from gambit.errors import GambitError
from gambit.storage.settings import DEFAULT_HOST, DEFAULT_PORT

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
GRACE_S = 5  # Ctrl-C: open streams get this long, then they are cancelled


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (GambitError naming what failed)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise GambitError(f"cannot serve on {host}: {exc.strerror or exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        why = "it is in use" if exc.errno in (48, 98, 10048) else (exc.strerror or str(exc))
        raise GambitError(f"cannot serve on {host}:{port}: {why}") from exc
    sock.setblocking(False)
    return sock


class LocalServer:
    """The API on ``host``:``port`` (port 0: any free one; ``port`` says which)."""

    def __init__(self, app: Starlette, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        self._socket = bind(host, port)
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False,
            timeout_graceful_shutdown=GRACE_S,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/v1"

    def run(self) -> None:
        """Serve until Ctrl-C or SIGTERM (uvicorn's handlers: a clean shutdown)."""
        self._server.run(sockets=[self._socket])

    def start(self) -> None:
        """Serve on a thread of its own; returns once requests are answered."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]},
            name="gambit-server", daemon=True,
        )  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._socket.close()
                raise GambitError(f"the server on {self.base_url} did not start")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """End the server: open streams are closed, the socket released."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(timeout)
        self._socket.close()
