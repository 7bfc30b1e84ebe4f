"""llama.cpp's RPC backend: other machines that hold some of the target's layers.

A worker (``gambit-worker``, ``gambit.cli.worker``) serves its CPU or GPU over
llama.cpp's RPC protocol (``ggml/include/ggml-rpc.h``); Gambit, the client,
adds each worker as a device and llama.cpp places layers on it. Three facts
of the vendored protocol shape this module:

- **A worker serves one client at a time**: its accept loop runs one
  connection to the end before it takes the next. The kernel still completes
  a second TCP handshake (the listen backlog), so a busy worker looks like one
  that accepts and never answers; ``probe`` says "busy" after its timeout.
- **The client aborts the process on any network failure** (``GGML_ABORT``
  when a connect, a handshake or a reply fails) and sets no timeouts. So
  ``probe`` speaks the handshake itself, in Python, with timeouts, before
  llama.cpp ever connects; and a target that uses workers runs in a process
  of its own (``gambit.engine.machine.target_host``), whose death is a message.
- **Requests and replies are framed the same way**: a request is
  ``cmd (u8) | size (u64) | payload``, a reply ``size (u64) | payload``.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import time
from dataclasses import dataclass

import llama_cpp as ll

from gambit.engine.machine import devices
from gambit.engine.machine.devices import DeviceMemory, LocalDevice
from gambit.errors import GambitError
from gambit.words import counted

DEFAULT_PORT = 50052
# The protocol of the vendored llama.cpp (ggml-rpc.h: RPC_PROTO_*_VERSION);
# a worker must have the same major and a minor no newer than ours.
PROTO_MAJOR = 7
PROTO_MINOR = 0
_CMD_GET_DEVICE_MEMORY = 11
_CMD_HELLO = 14
_CMD_DEVICE_COUNT = 15
_CONN_CAPS = 24  # transport.h: RPC_CONN_CAPS_SIZE (zeros: plain TCP)
PROBE_TIMEOUT_S = 3.0


class RpcWorkerError(GambitError):
    """A worker cannot be used; the message names it and says why."""

    def __init__(self, endpoint: str, message: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker said about itself in the handshake."""

    endpoint: str
    version: tuple[int, int, int]
    devices: tuple[DeviceMemory, ...]
    # The link's round-trip time: the fastest of the probe's request/reply
    # exchanges (HELLO and the memory queries, each a few bytes), so the
    # network's latency with next to no work on the worker's side.
    rtt_s: float = 0.0

    @property
    def free(self) -> int:
        return sum(d.free for d in self.devices)

    @property
    def total(self) -> int:
        return sum(d.total for d in self.devices)

    @property
    def summary(self) -> str:
        gib = 1024**3
        n = len(self.devices)
        return (
            f"{self.endpoint}: {self.free / gib:.1f} of {self.total / gib:.1f} GiB free"
            f" on {counted(n, 'device')} (protocol {'.'.join(map(str, self.version))})"
        )


def parse_endpoint(text: str) -> str:
    """``host:port`` (the port defaults to 50052), checked; raises ``GambitError``."""
    raw = text.strip()
    if not raw or any(c.isspace() for c in raw):
        raise GambitError(
            f"'{text}' is not a worker address: write host:port, e.g. 127.0.0.1:50052."
        )
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = raw, str(DEFAULT_PORT)
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise GambitError(
            f"'{text}' is not a worker address: write host:port, e.g. 127.0.0.1:50052."
        )
    return f"{host}:{int(port_text)}"


def parse_endpoints(text: str) -> tuple[str, ...]:
    """A comma-separated list of workers, each checked, without repeats."""
    seen: dict[str, None] = {}
    for part in text.split(","):
        if part.strip():
            seen[parse_endpoint(part)] = None
    return tuple(seen)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def _call(
    sock: socket.socket, cmd: int, payload: bytes, reply_size: int, rtts: list[float] | None = None
) -> bytes:
    t0 = time.perf_counter()
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size != reply_size:
        raise ValueError(f"reply of {size} bytes to command {cmd}, expected {reply_size}")
    reply = _recv_exact(sock, size)
    if rtts is not None:
        rtts.append(time.perf_counter() - t0)
    return reply


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> WorkerInfo:
    """Connect, shake hands and ask for memory, all within ``timeout`` per
    step. Raises ``RpcWorkerError`` with the reason in words."""
    host, port = _split(endpoint)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError as exc:
        raise RpcWorkerError(
            endpoint,
            f"No worker answers at {endpoint} (connection refused): start "
            "`gambit-worker` on that machine, or check the address and port.",
        ) from exc
    except TimeoutError as exc:
        raise RpcWorkerError(
            endpoint,
            f"{endpoint} did not answer within {timeout:g} s: the machine is off, "
            "the address is wrong, or a firewall drops the connection.",
        ) from exc
    except OSError as exc:
        raise RpcWorkerError(endpoint, f"Cannot reach {endpoint}: {exc.strerror or exc}.") from exc
    rtts: list[float] = []
    with sock:
        try:
            hello = _call(sock, _CMD_HELLO, bytes(_CONN_CAPS), 4 + _CONN_CAPS, rtts)
            version = (hello[0], hello[1], hello[2])
            if version[0] != PROTO_MAJOR or version[1] > PROTO_MINOR:
                raise RpcWorkerError(
                    endpoint,
                    f"{endpoint} speaks RPC protocol {'.'.join(map(str, version))}; this "
                    f"Gambit speaks {PROTO_MAJOR}.{PROTO_MINOR}: install the same Gambit "
                    "version on both machines.",
                )
            (count,) = struct.unpack("<I", _call(sock, _CMD_DEVICE_COUNT, b"", 4, rtts))
            memories = []
            for device in range(count):
                reply = _call(sock, _CMD_GET_DEVICE_MEMORY, struct.pack("<I", device), 16, rtts)
                memories.append(DeviceMemory(*struct.unpack("<QQ", reply)))
        except TimeoutError as exc:
            raise RpcWorkerError(
                endpoint,
                f"{endpoint} accepted the connection but did not answer within "
                f"{timeout:g} s: it is busy serving another Gambit (a worker serves "
                "one at a time), or it is not a Gambit worker.",
            ) from exc
        except (ConnectionError, ValueError, struct.error) as exc:
            raise RpcWorkerError(
                endpoint,
                f"{endpoint} is not a Gambit worker (it broke off the llama.cpp RPC handshake).",
            ) from exc
        except OSError as exc:
            raise RpcWorkerError(endpoint, f"Lost {endpoint}: {exc.strerror or exc}.") from exc
    return WorkerInfo(endpoint, version, tuple(memories), min(rtts))


# --- the RPC backend of the installed llama.cpp -------------------------------


NO_RPC_MESSAGE = (
    "This Gambit's llama.cpp was built without RPC support: reinstall with "
    'CMAKE_ARGS="-DGGML_RPC=ON" (the README\'s install command sets it).'
)


def _rpc_function(name: str) -> int:
    lib = devices.ggml()
    reg = lib.reg_by_name(b"RPC")
    address = lib.proc_address(reg, name.encode()) if reg else None
    if not address:
        raise GambitError(NO_RPC_MESSAGE)
    return int(address)


def supported() -> bool:
    """Whether the installed llama.cpp has the RPC backend."""
    return bool(ll.llama_supports_rpc())


def worker_devices(endpoints: tuple[str, ...]) -> list[int]:
    """The ggml devices of ``endpoints`` (connects; probe them first: a
    failure here aborts the process)."""
    lib = devices.ggml()
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(
        _rpc_function("ggml_backend_rpc_add_server")
    )
    found: list[int] = []
    for endpoint in endpoints:
        reg = add_server(endpoint.encode())
        found += [int(lib.reg_dev_get(reg, i)) for i in range(lib.reg_dev_count(reg))]
    return found


def device_list(endpoints: tuple[str, ...]) -> ctypes.Array[ctypes.c_void_p]:
    """``llama_model_params.devices`` for ``endpoints``: their devices, then
    NULL. The caller keeps the array alive while the model loads."""
    found = worker_devices(endpoints)
    return (ctypes.c_void_p * (len(found) + 1))(*found, None)


def serve(endpoint: str, n_threads: int, cache_dir: str | None, served: list[LocalDevice]) -> None:
    """Serve ``served`` (``devices.served_devices()``) at ``endpoint`` until the
    process ends (blocks; ctypes releases the GIL, so call it from a thread)."""
    start = ctypes.CFUNCTYPE(
        None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    )(_rpc_function("ggml_backend_rpc_start_server"))  # fmt: skip
    handles = (ctypes.c_void_p * len(served))(*(d.handle for d in served))
    cache = cache_dir.encode() if cache_dir else None
    start(endpoint.encode(), cache, n_threads, len(served), handles)
