"""A TCP relay that delays every chunk by a fixed time each way: the latency
of a LAN link, where the kernel's netem is not available.

usage: python delay_relay.py LISTEN_HOST:PORT TARGET_HOST:PORT ONE_WAY_MS
Prints "ready" once listening. Adds Python's own ~0.05-0.1 ms per chunk.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import sys
import threading
import time


def _pump(src: socket.socket, dst: socket.socket, delay: float) -> None:
    chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def send() -> None:
        while True:
            due, data = chunks.get()
            if not data:
                break
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        with_shutdown(dst)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while True:
        try:
            data = src.recv(1 << 20)
        except OSError:
            data = b""
        chunks.put((time.perf_counter() + delay, data))
        if not data:
            break


def with_shutdown(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_WR)


def main() -> None:
    listen, target, one_way_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    lh, lp = listen.rsplit(":", 1)
    th, tp = target.rsplit(":", 1)
    server = socket.create_server((lh, int(lp)))
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection((th, int(tp)))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b, one_way_ms / 1000), daemon=True).start()


if __name__ == "__main__":
    main()
