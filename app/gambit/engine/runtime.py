"""One llama.cpp model and context, driven through llama-cpp-python's low-level API.

Why the low-level API: ``Llama.__call__`` adds ~20 % of Python work per token;
this wrapper keeps the hot path to filling a pre-allocated batch, one
``llama_decode`` and a zero-copy numpy view of the logits.

A runtime owns one KV sequence (seq 0) and remembers which tokens are in it
(``kv_tokens``), so callers move the cache by saying which tokens it should
hold (``sync``) or where to cut it (``truncate``), never by position arithmetic.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp as ll
import numpy as np
import numpy.typing as npt

from gambit.errors import ContextOverflowError, DecodeError, ModelLoadError
from gambit.models.gguf_file import check_model_file

log = logging.getLogger("gambit.llama")

FloatRows = npt.NDArray[np.float32]

# ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line)
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_last_level = [logging.DEBUG]
_backend_lock = threading.Lock()
_backend_ready = False


@ll.llama_log_callback  # type: ignore[untyped-decorator]
def _route_llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # llama.cpp prints a lot to stderr; send it to Python logging instead, where
    # the CLI keeps it quiet and the app writes it to its log file.
    if level != 5:
        _last_level[0] = _GGML_LEVELS.get(level, logging.DEBUG)
    message = text.decode("utf-8", "replace").rstrip("\n")
    if message:
        log.log(_last_level[0], "%s", message)


def ensure_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            ll.llama_log_set(_route_llama_log, ctypes.c_void_p(0))
            ll.llama_backend_init()
            _backend_ready = True


class _ThreadpoolParams(ctypes.Structure):
    # ggml.h: struct ggml_threadpool_params (GGML_MAX_N_THREADS = 512)
    _fields_ = [
        ("cpumask", ctypes.c_bool * 512),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    ]


_threadpools: dict[int, int | None] = {}

GGML_TYPE_Q8_0 = 8  # ggml.h enum ggml_type
LLAMA_FLASH_ATTN_ENABLED = 1  # llama.h enum llama_flash_attn_type


def shared_threadpool(n_threads: int) -> int | None:
    """One ggml CPU threadpool per thread count, shared by every context.

    Each llama.cpp context otherwise gets a pool of its own whose idle workers
    spin-wait after each decode, and a target and a draft model taking turns
    would each keep a pool spinning. Builds with OpenMP (llama-cpp-python's
    default on Linux) run on OpenMP's single pool instead and ignore this;
    there it made no measurable difference. Returns None where the CPU
    backend's threadpool API is not available.
    """
    with _backend_lock:
        if n_threads in _threadpools:
            return _threadpools[n_threads]
        pool = None
        try:
            lib_dir = Path(ll.__file__).parent / "lib"
            candidates = sorted(lib_dir.glob("*ggml-cpu*"))
            ggml_cpu = ctypes.CDLL(str(candidates[0])) if candidates else ctypes.CDLL(None)
            ggml_cpu.ggml_threadpool_params_default.restype = _ThreadpoolParams
            ggml_cpu.ggml_threadpool_params_default.argtypes = [ctypes.c_int]
            ggml_cpu.ggml_threadpool_new.restype = ctypes.c_void_p
            ggml_cpu.ggml_threadpool_new.argtypes = [ctypes.POINTER(_ThreadpoolParams)]
            params = ggml_cpu.ggml_threadpool_params_default(n_threads)
            pool = ggml_cpu.ggml_threadpool_new(ctypes.byref(params)) or None
        except (OSError, AttributeError) as exc:
            log.debug("no shared threadpool: %s", exc)
        _threadpools[n_threads] = pool
        return pool


def _attach_threadpool(ctx: Any, pool: int) -> bool:
    try:
        attach = ll.llama_cpp._lib.llama_attach_threadpool
    except AttributeError:
        return False
    attach.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    attach.restype = None
    attach(ctx, pool, pool)
    return True


def default_threads() -> int:
    """Threads for decoding: the physical cores, approximated.

    Decoding is memory-bound, so hyper-threads and efficiency cores do not help
    and contend for bandwidth; halve the logical count on larger machines.
    """
    n = os.cpu_count() or 1
    return n if n <= 4 else n // 2


@dataclass(frozen=True)
class RuntimeOptions:
    n_ctx: int = 4096
    n_threads: int = 0  # 0: default_threads()
    n_gpu_layers: int = 0  # -1: all layers on the GPU
    n_batch: int = 512
    # Batch-invariant kernels: a token's logits are the same whether it is
    # decoded alone (plain decoding) or in a verification batch, so greedy
    # speculation reproduces plain decoding token for token. Two llama.cpp CPU
    # paths break that and strict mode avoids both:
    # - weight repacking ("extra buffer types") changes batched matmuls for
    #   some weight types (F16, K-quants);
    # - with 2+ threads, single-token flash attention over an F16 KV cache of
    #   512+ cells splits the cache across threads (measured: logits off by
    #   up to 1.35 past position 256). A Q8_0 KV cache takes the same kernel
    #   for single tokens and small batches.
    # Cost measured here: ~8 % slower single-token decoding at 200-600 tokens
    # of context (SmolLM2 Q8_0, 2 threads).
    strict_batch_invariance: bool = True


class ModelRuntime:
    """A loaded model with one context. Not thread-safe: use from one thread."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None):
        self.path = Path(path)
        self.options = options or RuntimeOptions()
        self.kv_tokens: list[int] = []
        # Time spent inside llama.cpp (decode and the logits fetch, which
        # synchronises with the backend): the rest of the wall time is ours.
        self.decode_seconds = 0.0
        self.decode_calls = 0
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}
        self._model: Any = None
        self._ctx: Any = None
        self._batch: Any = None

        check_model_file(self.path)
        ensure_backend()
        opts = self.options
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = opts.n_gpu_layers
        mparams.use_extra_bufts = not opts.strict_batch_invariance
        self._model = ll.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise ModelLoadError(str(self.path), "llama.cpp could not load this model")

        threads = opts.n_threads or default_threads()
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = opts.n_ctx
        cparams.n_batch = opts.n_batch
        cparams.n_ubatch = opts.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        if opts.strict_batch_invariance:
            cparams.type_k = GGML_TYPE_Q8_0
            cparams.type_v = GGML_TYPE_Q8_0
            cparams.flash_attn_type = LLAMA_FLASH_ATTN_ENABLED  # a quantized V cache needs it
        self._ctx = ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise ModelLoadError(
                str(self.path), f"llama.cpp could not create a context of {opts.n_ctx} tokens"
            )
        pool = shared_threadpool(threads) if opts.n_gpu_layers == 0 else None
        self.shared_threadpool = pool is not None and _attach_threadpool(self._ctx, pool)
        self.n_threads = threads
        self.n_ctx = ll.llama_n_ctx(self._ctx)
        # llama.cpp may cap the batch below what was asked (at the context size)
        self.n_batch = min(opts.n_batch, ll.llama_n_batch(self._ctx))
        self._mem = ll.llama_get_memory(self._ctx)
        self.vocab = ll.llama_model_get_vocab(self._model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)  # after n_batch is known
        # Every token we decode lives in sequence 0; set the seq ids once.
        for i in range(self.n_batch):
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = 0
        self._b_token = self._batch.token
        self._b_pos = self._batch.pos
        self._b_logits = self._batch.logits

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> ModelRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a safety net; owners call close()
        with contextlib.suppress(Exception):  # interpreter shutdown may have torn down ll
            self.close()

    # ------------------------------------------------------------------ decoding
    def decode(self, tokens: list[int], *, all_logits: bool = False) -> int:
        """Append ``tokens`` to the KV cache.

        With ``all_logits`` every token gets a logits row (rows 0..n-1, needs
        n <= n_batch); otherwise only the last one does (read it as row -1). Returns the
        number of logits rows available.
        """
        n = len(tokens)
        if n == 0:
            return 0
        start = len(self.kv_tokens)
        if start + n > self.n_ctx:
            raise ContextOverflowError(
                f"the context window is full ({self.n_ctx} tokens): "
                f"{start} in use, {n} more requested"
            )
        if all_logits and n > self.n_batch:
            raise ValueError(f"cannot return logits for {n} tokens in one batch of {self.n_batch}")
        batch = self._batch
        # Index the batch's arrays through pointers fetched once (in __init__):
        # each `batch.token` attribute read builds a new ctypes object.
        tok_arr, pos_arr, out_arr = self._b_token, self._b_pos, self._b_logits
        for chunk_start in range(0, n, self.n_batch):
            chunk = tokens[chunk_start : chunk_start + self.n_batch]
            last_chunk = chunk_start + self.n_batch >= n
            m = len(chunk)
            base = start + chunk_start
            for i, tok in enumerate(chunk):
                tok_arr[i] = tok
                pos_arr[i] = base + i
                out_arr[i] = all_logits
            if last_chunk:
                out_arr[m - 1] = True
            batch.n_tokens = m
            t0 = time.perf_counter()
            rc = ll.llama_decode(self._ctx, batch)
            self.decode_seconds += time.perf_counter() - t0
            self.decode_calls += 1
            if rc != 0:
                # On failure llama.cpp may keep the ubatches it processed:
                # resynchronise our view of the cache with what it holds.
                kept = ll.llama_memory_seq_pos_max(self._mem, 0) + 1
                ll.llama_memory_seq_rm(self._mem, 0, kept, -1)
                self.kv_tokens = (self.kv_tokens + tokens[: chunk_start + m])[:kept]
                reason = {1: "no free KV slot (context full)", 2: "aborted"}.get(
                    rc, "backend error"
                )
                raise DecodeError(f"llama_decode failed with code {rc}: {reason}")
        self.kv_tokens.extend(tokens)
        return n if all_logits else 1

    def logits(self, row: int) -> npt.NDArray[np.float32]:
        """Row ``row`` of the last decode's logits, a view into llama.cpp's buffer.

        Valid until the next decode; copy it if you need it longer.
        """
        t0 = time.perf_counter()
        ptr = ll.llama_get_logits_ith(self._ctx, row)  # waits for the backend to finish
        self.decode_seconds += time.perf_counter() - t0
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def logits_rows(self, n_rows: int) -> FloatRows:
        """All ``n_rows`` output rows of the last decode as one (n, vocab) view."""
        t0 = time.perf_counter()
        ptr = ll.llama_get_logits(self._ctx)  # waits for the backend to finish
        self.decode_seconds += time.perf_counter() - t0
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def truncate(self, n_keep: int) -> None:
        """Drop every cached token from position ``n_keep`` on."""
        if n_keep < len(self.kv_tokens):
            ll.llama_memory_seq_rm(self._mem, 0, n_keep, -1)
            del self.kv_tokens[n_keep:]

    def sync(self, tokens: list[int]) -> int:
        """Make the cache hold exactly ``tokens``, with logits for the last one.

        Reuses the longest common prefix with what is cached (multi-turn chat
        re-evaluates only the new turn). Returns the number of tokens decoded.
        """
        if not tokens:
            raise ValueError("cannot sync to an empty token list")
        keep = common_prefix_length(self.kv_tokens, tokens)
        keep = min(keep, len(tokens) - 1)  # the last token must be decoded for its logits
        self.truncate(keep)
        self.decode(tokens[keep:])
        return len(tokens) - keep

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)
        self.kv_tokens.clear()

    # ----------------------------------------------------------------- tokenizer
    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_piece(self, token: int) -> bytes:
        """The bytes a token stands for; control tokens render as nothing."""
        piece = self._piece_cache.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = ll.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = ll.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
            piece = buf.raw[:n]
            self._piece_cache[token] = piece
        return piece

    def token_text(self, token: int) -> str:
        """The token's text as stored in the vocabulary, special tokens included."""
        return (ll.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "replace")

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_piece(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        eog = self._eog_cache.get(token)
        if eog is None:
            eog = bool(ll.llama_vocab_is_eog(self.vocab, token))
            self._eog_cache[token] = eog
        return eog

    # ------------------------------------------------------------------ metadata
    @property
    def add_bos(self) -> bool:
        return bool(ll.llama_vocab_get_add_bos(self.vocab))

    @property
    def bos_token(self) -> int:
        return int(ll.llama_vocab_bos(self.vocab))

    @property
    def eos_token(self) -> int:
        return int(ll.llama_vocab_eos(self.vocab))

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_model_meta_val_str(self._model, key.encode(), buf, 256)
        if n < 0:
            return None
        if n >= 256:
            buf = ctypes.create_string_buffer(n + 1)
            ll.llama_model_meta_val_str(self._model, key.encode(), buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        raw = ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", "replace") if raw else None

    @property
    def n_params(self) -> int:
        return int(ll.llama_model_n_params(self._model))

    @property
    def model_size_bytes(self) -> int:
        return int(ll.llama_model_size(self._model))

    @property
    def vocab_type(self) -> int:
        return int(ll.llama_vocab_type(self.vocab))

    @property
    def add_eos(self) -> bool:
        return bool(ll.llama_vocab_get_add_eos(self.vocab))


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the common case (appending), compared at C speed
        return n
    lo, hi = 0, n  # binary search for the first difference on prefixes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
