"""A target whose layers live on RPC workers, run in a process of its own.

llama.cpp's RPC client aborts the whole process when a worker fails (a
refused connect, a broken reply: ``GGML_ABORT`` in ggml-rpc.cpp) and waits
forever on a worker that stops answering. So the model that talks to the
workers is loaded in a child process (``_child_main``) and ``HostedRuntime``
forwards each call to it over a pipe. When the child dies, the call raises
``WorkerLostError`` naming the worker that stopped answering; the reply so far
stays with the caller and the app stays up. When Stop is pressed and the
child does not answer within ``STOP_GRACE_S``, it is ended, never waited on.

The tokenizer and the model's metadata come from a vocabulary-only load of
the same file here, so tokenizing and the per-token text lookups of a reply
cost no round trip. Each call's logits come back pickled through the pipe
(9 rows of a 49k vocabulary are 1.7 MB, ~1-2 ms: small next to a pass
through a network).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import llama_cpp as ll
import numpy as np
import numpy.typing as npt

from gambit.engine.machine import devices, rpc
from gambit.engine.machine.kernels import implied_kernels
from gambit.engine.machine.llama_lib import ensure_backend
from gambit.engine.machine.placement import placement_for
from gambit.engine.machine.runtime import FloatRows, ModelRuntime, RuntimeOptions
from gambit.errors import (
    ContextOverflowError,
    DecodeAbortedError,
    DecodeError,
    GambitError,
    ModelFileError,
    ModelLoadError,
)
from gambit.formats.gguf_file import check_model_file

# How long after Stop a worker may take to finish its pass before the child
# that waits on it is ended (a pass over a LAN takes milliseconds to seconds).
STOP_GRACE_S = 5.0
# The longest one call may take before the workers count as lost: a prefill
# of a full context over a slow link, with room to spare.
CALL_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 900.0  # sending a large model's weights over a slow network
_POLL_S = 0.05
_ERRORS: dict[str, type[GambitError]] = {
    cls.__name__: cls
    for cls in (ContextOverflowError, DecodeAbortedError, DecodeError, ModelLoadError, GambitError)
}
# Calls that change the KV cache: their reply carries the child's kv_tokens.
_MUTATING = frozenset({"decode", "truncate", "sync", "clear", "decode_tree", "commit_tree"})


class WorkerLostError(DecodeError):
    """The workers holding the target's layers stopped answering."""


def _child_main(
    conn: Connection, path: str, options: RuntimeOptions, abort: Any, log_path: str
) -> None:
    # llama.cpp's abort message goes to stderr: keep it where the parent reads it.
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    try:
        rt = ModelRuntime(path, options)
    except GambitError as exc:
        conn.send(("err", type(exc).__name__, str(exc), None))
        return
    rt.abort = abort
    conn.send(("ok", _facts(rt), _state(rt)))
    while True:
        try:
            name, args, kwargs = conn.recv()
        except EOFError:
            break
        if name == "close":
            break
        try:
            result = getattr(rt, name)(*args, **kwargs)
            if name in ("logits", "logits_rows"):
                result = np.array(result, copy=True)
            conn.send(("ok", result, _state(rt, name in _MUTATING or name == "sync")))
        except GambitError as exc:
            conn.send(("err", type(exc).__name__, str(exc), _state(rt, True)))
        except (ValueError, TypeError) as exc:
            conn.send(("err", "GambitError", f"{type(exc).__name__}: {exc}", _state(rt, True)))
    rt.close()


def _facts(rt: ModelRuntime) -> dict[str, Any]:
    return {
        "n_ctx": rt.n_ctx,
        "n_batch": rt.n_batch,
        "n_seq_max": rt.n_seq_max,
        "n_threads": rt.n_threads,
        "n_params": rt.n_params,
        "model_size_bytes": rt.model_size_bytes,
        "kernels": rt.kernels,
    }


def _state(rt: ModelRuntime, with_tokens: bool = False) -> tuple[list[int] | None, float, int]:
    return (list(rt.kv_tokens) if with_tokens else None, rt.decode_seconds, rt.decode_calls)


class HostedRuntime(ModelRuntime):
    """``ModelRuntime``'s interface for a target split over RPC workers, the
    model itself in a child process (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions) -> None:
        # (ModelRuntime.__init__ is not called: the model is loaded over there)
        self._init_state(path, options)
        # The reply's Stop event, for the whole reply (``abort`` is set only
        # during the prompt): a worker that hangs mid-round must not hang Stop.
        self.cancel: threading.Event | None = None
        self.kernels = options.kernels or implied_kernels(options.strict_batch_invariance)
        self.shared_threadpool = False
        self._proc: Any = None
        self._conn: Connection | None = None
        self._lost: WorkerLostError | None = None
        header = check_model_file(self.path)
        self.tokenizer_digest = header.tokenizer_digest
        # A failed connect inside llama.cpp would end the process: ask first.
        self._workers = [rpc.probe(endpoint) for endpoint in options.rpc_workers]
        self._load_vocab()
        # Where llama.cpp will put the layers, from the memory the workers just reported.
        self.placement = placement_for(
            _block_count(header.metadata, header.architecture),
            options.n_gpu_layers,
            self._workers,
            host_free=devices.device_memory(devices.cpu_device()).free,
        )
        fd, self._log = tempfile.mkstemp(prefix="gambit-rpc-", suffix=".log")
        os.close(fd)
        try:
            self._start(options)
        except BaseException:
            self.close()
            raise

    def _load_vocab(self) -> None:
        ensure_backend()
        params = ll.llama_model_default_params()
        params.vocab_only = True
        self._model = ll.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            raise ModelLoadError(str(self.path), "llama.cpp could not read its vocabulary")
        self.vocab = ll.llama_model_get_vocab(self._model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)

    def _start(self, options: RuntimeOptions) -> None:
        try:
            self._spawn(options)
        except ModelFileError as exc:
            # Most often a worker without the memory for its share of layers.
            seen = "; ".join(i.summary for i in self._workers)
            detail = _last_line(self._log)
            raise ModelLoadError(
                str(self.path),
                f"llama.cpp could not place this model on the workers ({seen}): one may "
                "lack the memory for its share of layers (Settings → Workers: fewer "
                f"worker layers, or another worker){f'; llama.cpp: {detail}' if detail else ''}",
            ) from exc

    def _spawn(self, options: RuntimeOptions) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process that holds Qt and llama.cpp
        self._abort_child = ctx.Event()
        parent, child = ctx.Pipe()
        self._conn = parent
        self._proc = ctx.Process(
            target=_child_main,
            args=(child, str(self.path), options, self._abort_child, self._log),
            name="gambit-target-host",
            daemon=True,
        )
        self._proc.start()
        self.process_id = self._proc.pid
        child.close()
        facts = self._reply("load", LOAD_TIMEOUT_S)
        for key in ("n_ctx", "n_batch", "n_seq_max", "n_threads", "kernels"):
            setattr(self, key, facts[key])
        self._n_params, self._size = facts["n_params"], facts["model_size_bytes"]

    # ------------------------------------------------------------------ the pipe
    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._lost is not None:
            raise self._lost
        if self._conn is None:
            raise DecodeError("the target was closed")
        if not self._stopping():
            self._abort_child.clear()
        try:
            self._conn.send((name, args, kwargs))
        except OSError:
            raise self._lose() from None
        return self._reply(name, CALL_TIMEOUT_S)

    def _reply(self, name: str, timeout: float) -> Any:
        assert self._conn is not None
        deadline = time.monotonic() + timeout
        stopped_at: float | None = None
        while True:
            try:
                ready = self._conn.poll(_POLL_S)
            except OSError:
                ready = False
            if ready:
                try:
                    message = self._conn.recv()
                except (EOFError, OSError):
                    raise self._lose() from None
                return self._unpack(message)
            now = time.monotonic()
            if not self._proc.is_alive():
                raise self._lose()
            if self._stopping():
                self._abort_child.set()  # llama.cpp checks it between graph nodes
                stopped_at = stopped_at or now
                if now - stopped_at > STOP_GRACE_S:
                    raise self._lose(f"did not finish a pass within {STOP_GRACE_S:g} s of Stop")
            if now > deadline:
                raise self._lose(f"did not answer within {timeout:g} s ({name})")

    def _stopping(self) -> bool:
        return any(e is not None and e.is_set() for e in (self.abort, self.cancel))

    def _unpack(self, message: tuple[Any, ...]) -> Any:
        if message[0] == "ok":
            _, result, state = message
            tokens, self.decode_seconds, self.decode_calls = state
            if tokens is not None:
                self.kv_tokens = tokens
            return result
        _, kind, text, state = message
        if state is not None:
            self.kv_tokens = state[0]
        cls = _ERRORS.get(kind, GambitError)
        if issubclass(cls, ModelFileError):
            raise cls(str(self.path), text.removesuffix(f": {self.path}"))
        raise cls(text)

    def _lose(self, why: str | None = None) -> WorkerLostError:
        """End the child and say which worker is gone, as far as can be told."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(2)
        gone = []
        for endpoint in self.options.rpc_workers:
            try:
                rpc.probe(endpoint, timeout=1.0)
            except rpc.RpcWorkerError as exc:
                if "busy" not in str(exc):  # a worker still finishing our pass is there
                    gone.append(endpoint)
        detail = _last_line(self._log)
        names = ", ".join(gone) or ", ".join(self.options.rpc_workers)
        reason = why or ("stopped answering" if gone else "lost the connection")
        text = f"The worker {names} {reason}: the reply so far is kept."
        if detail:
            text += f" (llama.cpp: {detail})"
        text += (
            " Reload to continue, or remove the worker in Settings → Workers to run on "
            "this machine only."
        )
        self._lost = WorkerLostError(text)
        self._lost.endpoints = tuple(gone)  # type: ignore[attr-defined]
        return self._lost

    # --------------------------------------------------------- ModelRuntime's API
    def decode(self, tokens: list[int], *, all_logits: bool = False, n_logits: int = 0) -> int:
        return int(self._call("decode", tokens, all_logits=all_logits, n_logits=n_logits))

    def logits(self, row: int) -> npt.NDArray[np.float32]:
        result: npt.NDArray[np.float32] = self._call("logits", row)
        return result

    def logits_rows(self, n_rows: int) -> FloatRows:
        result: FloatRows = self._call("logits_rows", n_rows)
        return result

    def truncate(self, n_keep: int) -> None:
        if n_keep < len(self.kv_tokens):
            self._call("truncate", n_keep)

    def decodes_to_sync(self, tokens: list[int], *, logits: bool = True) -> int:
        return int(self._call("decodes_to_sync", tokens, logits=logits))

    def sync(self, tokens: list[int], *, logits: bool = True) -> int:
        return int(self._call("sync", tokens, logits=logits))

    def clear(self) -> None:
        self._call("clear")

    def decode_tree(
        self, roots: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> int:
        return int(self._call("decode_tree", list(roots), list(tokens), list(parents)))

    def set_threads(self, n: int) -> None:
        """The host's own threads (its layers here; the workers keep theirs)."""
        if n != self.n_threads:
            self._call("set_threads", n)
            self.n_threads = n

    def commit_tree(self, n_main: int) -> None:
        self._call("commit_tree", n_main)

    @property
    def n_params(self) -> int:
        return int(self._n_params)

    @property
    def model_size_bytes(self) -> int:
        return int(self._size)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(("close", (), {}))
            conn.close()
        if self._proc is not None:
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(2)
            self._proc = None
        log = getattr(self, "_log", None)
        if log is not None:
            with contextlib.suppress(OSError):
                os.unlink(log)
        super().close()


def _block_count(metadata: dict[str, Any], arch: str) -> int:
    """llama.cpp's n_layer (the vocabulary-only load here leaves it 0)."""
    value = metadata.get(f"{arch}.block_count", 0)
    return value if isinstance(value, int) else 0


def _last_line(path: str) -> str:
    """The last line llama.cpp printed in the child (its abort message)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln and not ln.startswith(("llama_", "load", "print_info"))]
    return lines[-1][:200] if lines else ""


def open_target(path: str | os.PathLike[str], options: RuntimeOptions) -> ModelRuntime:
    """The target's runtime: in this process, or in a child when workers hold layers."""
    if options.rpc_workers:
        if not rpc.supported():
            raise GambitError(rpc.NO_RPC_MESSAGE)
        return HostedRuntime(path, options)
    return ModelRuntime(path, options)
