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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp as ll
import numpy as np
import numpy.typing as npt

from gambit.engine.machine import rpc
from gambit.engine.machine.kernels import KernelConfig, implied_kernels
from gambit.engine.machine.limits import threads_problem
from gambit.engine.machine.llama_lib import ensure_backend
from gambit.engine.machine.threads import default_threads
from gambit.engine.machine.tokens import common_prefix_length
from gambit.errors import ContextOverflowError, DecodeAbortedError, DecodeError, ModelLoadError
from gambit.formats.gguf_file import check_model_file

log = logging.getLogger("gambit.llama")

FloatRows = npt.NDArray[np.float32]

# Guards the shared threadpools: contexts may be created on several threads.
_threadpool_lock = threading.Lock()


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
# Decodes of this many tokens or more (prompt processing) can be aborted: llama.cpp
# calls the callback between graph nodes, a cost only long decodes hide.
ABORTABLE_TOKENS = 16
_NO_ABORT = ll.ggml_abort_callback()  # a NULL callback


def shared_threadpool(n_threads: int) -> int | None:
    """One ggml CPU threadpool per thread count, shared by every context.

    Each llama.cpp context otherwise gets a pool of its own whose idle workers
    spin-wait after each decode, and a target and a draft model taking turns
    would each keep a pool spinning. Builds with OpenMP (llama-cpp-python's
    default on Linux) run on OpenMP's single pool instead and ignore this;
    there it made no measurable difference. Returns None where the CPU
    backend's threadpool API is not available.
    """
    with _threadpool_lock:
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


@dataclass(frozen=True)
class RuntimeOptions:
    n_ctx: int = 4096
    n_threads: int = 0  # 0: automatic (gambit.engine.machine.threads)
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
    # The kernels to run on, as chosen by the probe (gambit.engine.machine.kernels);
    # None: those strict_batch_invariance implies (EXACT, or llama.cpp's own
    # defaults, which can crash on some CPUs: Engine always probes first).
    kernels: KernelConfig | None = None
    # Most KV sequences in use at once: 1 for chains; a token tree needs one
    # per leaf (``decode_tree``), all in one unified cache.
    n_seq_max: int = 1
    # Workers (gambit.engine.machine.rpc) that hold the target's layers: n_gpu_layers
    # of them (-1 or 0: all), split by their free memory; the rest stay here.
    rpc_workers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # The last line of defence: the CLI and the settings check first, with
        # the same rule, and a negative count crashes llama.cpp.
        problem = threads_problem(self.n_threads)
        if problem is not None:
            raise ValueError(f"the thread count {problem}")


class ModelRuntime:
    """A loaded model with one context. Not thread-safe: use from one thread."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None):
        self._init_state(path, options or RuntimeOptions())
        self.tokenizer_digest = check_model_file(self.path).tokenizer_digest
        ensure_backend()
        self._load(self.options)

    def _init_state(self, path: str | os.PathLike[str], options: RuntimeOptions) -> None:
        """Every runtime's fields before a model loads (``HostedRuntime``'s too)."""
        self.path = Path(path)
        self.options = options
        self.process_id: int | None = None  # the process it decodes in, where not this one
        self.tokenizer_digest = ""  # GGUFHeader's: equal digests, the same token texts
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
        # While set to an event, a decode of ABORTABLE_TOKENS or more stops
        # midway once it is set (llama_decode returns 2: DecodeAbortedError).
        self.abort: threading.Event | None = None
        self._abort_cb = ll.ggml_abort_callback(self._aborted)  # (kept alive with us)
        self._tree: _PendingTree | None = None
        # The cache length whose last token's logits llama.cpp's buffer holds
        # as row -1 (-1: none): a sync to exactly what the cache holds then
        # decodes nothing (see sync).
        self._logits_for = -1

    def _load(self, opts: RuntimeOptions) -> None:
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = opts.n_gpu_layers
        self.kernels = opts.kernels or implied_kernels(opts.strict_batch_invariance)
        mparams.use_extra_bufts = self.kernels.repack
        if opts.rpc_workers:
            self._devices = rpc.device_list(opts.rpc_workers)  # alive while loading
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
            mparams.n_gpu_layers = opts.n_gpu_layers if opts.n_gpu_layers > 0 else 999
        self._model = ll.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise ModelLoadError(str(self.path), "llama.cpp could not load this model")

        threads = opts.n_threads or default_threads()
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = opts.n_ctx
        cparams.n_batch = opts.n_batch
        cparams.n_ubatch = opts.n_batch
        cparams.n_seq_max = max(1, opts.n_seq_max)
        # Tree branches share the committed prefix's cells: one unified cache
        # (per-sequence streams would each get n_ctx / n_seq_max cells).
        cparams.kv_unified = opts.n_seq_max > 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        if self.kernels.kv_type == "q8_0":
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
        self.n_seq_max = max(1, opts.n_seq_max)
        self._batch = ll.llama_batch_init(self.n_batch, 0, self.n_seq_max)  # after n_batch is known
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

    def set_threads(self, n: int) -> None:
        """Decode on ``n`` threads from the next decode on (the cache stays;
        ``gambit.engine.machine.threads`` follows the load with it)."""
        if n != self.n_threads:
            ll.llama_set_n_threads(self._ctx, n, n)
            self.n_threads = n

    # ------------------------------------------------------------------ decoding
    def decode(self, tokens: list[int], *, all_logits: bool = False, n_logits: int = 0) -> int:
        """Append ``tokens`` to the KV cache.

        With ``all_logits`` every token gets a logits row (rows 0..n-1, needs
        n <= n_batch); with ``n_logits`` the last ``n_logits`` tokens do;
        otherwise only the last one does (read it as row -1). Returns the
        number of logits rows available.
        """
        n = len(tokens)
        if n == 0:
            return 0
        if self._tree is not None:
            self.commit_tree(0)
        start = len(self.kv_tokens)
        if start + n > self.n_ctx:
            raise ContextOverflowError(
                f"the context window is full ({self.n_ctx} tokens): "
                f"{start} in use, {n} more requested"
            )
        if all_logits:
            n_logits = n
        n_logits = min(n_logits, n)
        if n_logits > 1 and n > self.n_batch:
            raise ValueError(f"cannot return logits for {n} tokens in one batch of {self.n_batch}")
        abortable = self.abort is not None and n >= ABORTABLE_TOKENS
        if abortable:  # llama.cpp asks between graph nodes: only worth it for long decodes
            ll.llama_set_abort_callback(self._ctx, self._abort_cb, None)
        self._logits_for = -1
        try:
            self._decode_chunks(tokens, n_logits, start)
        finally:
            if abortable:
                ll.llama_set_abort_callback(self._ctx, _NO_ABORT, None)
        self.kv_tokens.extend(tokens)
        self._logits_for = len(self.kv_tokens)  # (the last token always gets a row)
        return max(n_logits, 1)

    def _aborted(self, _data: object) -> bool:
        event = self.abort
        return event is not None and event.is_set()

    def _decode_chunks(self, tokens: list[int], n_logits: int, start: int) -> None:
        n = len(tokens)
        batch = self._batch
        # Index the batch's arrays through pointers fetched once (in __init__):
        # each `batch.token` attribute read builds a new ctypes object.
        tok_arr, pos_arr, out_arr = self._b_token, self._b_pos, self._b_logits
        for chunk_start in range(0, n, self.n_batch):
            chunk = tokens[chunk_start : chunk_start + self.n_batch]
            last_chunk = chunk_start + self.n_batch >= n
            m = len(chunk)
            base = start + chunk_start
            first_out = n - n_logits  # the first token that gets logits
            for i, tok in enumerate(chunk):
                tok_arr[i] = tok
                pos_arr[i] = base + i
                out_arr[i] = chunk_start + i >= first_out
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
                raise _decode_error(rc)

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
        if self._tree is not None:
            self.commit_tree(0)
        if n_keep < len(self.kv_tokens):
            ll.llama_memory_seq_rm(self._mem, 0, n_keep, -1)
            del self.kv_tokens[n_keep:]
            self._logits_for = -1

    def decodes_to_sync(self, tokens: list[int], *, logits: bool = True) -> int:
        """How many tokens ``sync(tokens, logits=logits)`` would decode."""
        if not logits:
            return len(tokens) - common_prefix_length(self.kv_tokens, tokens)
        if self._logits_for == len(tokens) == len(self.kv_tokens) and self.kv_tokens == tokens:
            return 0  # all there, and the last decode left the last token's logits
        keep = common_prefix_length(self.kv_tokens, tokens)
        return len(tokens) - min(keep, len(tokens) - 1)  # the last one, for its logits

    def sync(self, tokens: list[int], *, logits: bool = True) -> int:
        """Make the cache hold exactly ``tokens``, with logits for the last one
        unless ``logits`` is False (a prompt read ahead of drafting: the first
        draft decodes its last token). Returns the number of tokens decoded.

        Reuses the longest common prefix with what is cached (multi-turn chat
        re-evaluates only the new turn), and decodes nothing where the cache
        holds exactly ``tokens`` and the last decode left their last token's
        logits: a prompt read, then drafted from, used to decode a token twice.
        """
        if not tokens:
            raise ValueError("cannot sync to an empty token list")
        n = self.decodes_to_sync(tokens, logits=logits)
        self.truncate(len(tokens) - n)
        if n:
            self.decode(tokens[-n:])
        return n

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)
        self.kv_tokens.clear()
        self._tree = None
        self._logits_for = -1

    # ---------------------------------------------------------------- token trees
    def decode_tree(
        self, roots: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> int:
        """Decode ``roots`` (the next tokens of the cached sequence) and a tree of
        ``tokens`` hung below the last of them, all in one batch. Logits rows:
        row 0 for the last root, row i + 1 for node i. ``parents[i]`` is node
        i's parent, -1 for the root, and comes before i.

        Each leaf gets a KV sequence of its own; a node carries the sequences of
        every leaf below it, and the roots and the cached prefix are shared by
        all of them (``llama_memory_seq_cp``), so llama.cpp's attention follows
        the tree: each node sees the prefix and its own ancestors only. Leaves
        are numbered in node order, so the main chain (nodes 0..k-1, the lowest
        indices) ends in sequence 0. Call ``commit_tree`` next.
        """
        if self._tree is not None:
            self.commit_tree(0)
        self._logits_for = -1  # (the rows are the tree's, whichever path is kept)
        if not roots:
            raise ValueError("a tree needs at least one root token")
        n = len(roots) + len(tokens)
        kids = [0] * len(tokens)
        for p in parents:
            if p >= 0:
                kids[p] += 1
        leaves = [i for i in range(len(tokens)) if kids[i] == 0]
        n_seq = max(1, len(leaves))
        if n_seq > self.n_seq_max:
            raise ValueError(f"a tree with {n_seq} leaves needs n_seq_max >= {n_seq}")
        if n > self.n_batch:
            raise ValueError(f"a tree of {n} tokens does not fit one batch of {self.n_batch}")
        start = len(self.kv_tokens)
        if start + n > self.n_ctx:
            raise ContextOverflowError(
                f"the context window is full ({self.n_ctx} tokens): "
                f"{start} in use, {n} more requested"
            )
        base = start + len(roots) - 1  # the last root's position
        seqs: list[list[int]] = [[] for _ in tokens]  # those of the leaves below each node
        depth = [0] * len(tokens)
        for i, p in enumerate(parents):
            depth[i] = 1 if p < 0 else depth[p] + 1
        for s, leaf in enumerate(leaves):
            node = leaf
            while node >= 0:
                seqs[node].append(s)
                node = parents[node]
        for s in range(1, n_seq):
            ll.llama_memory_seq_cp(self._mem, 0, s, -1, -1)
        batch = self._batch
        tok_arr, pos_arr, out_arr = self._b_token, self._b_pos, self._b_logits
        n_seq_id, seq_id = batch.n_seq_id, batch.seq_id
        every = list(range(n_seq))
        rows = [(t, start + i, every) for i, t in enumerate(roots)]
        rows += [(t, base + depth[i], seqs[i]) for i, t in enumerate(tokens)]
        for i, (tok, pos, ids) in enumerate(rows):
            tok_arr[i] = tok
            pos_arr[i] = pos
            out_arr[i] = i >= len(roots) - 1
            n_seq_id[i] = len(ids)
            row_ids = seq_id[i]
            for j, s in enumerate(ids):
                row_ids[j] = s
        batch.n_tokens = n
        t0 = time.perf_counter()
        rc = ll.llama_decode(self._ctx, batch)
        self.decode_seconds += time.perf_counter() - t0
        self.decode_calls += 1
        for i in range(n):  # back to the one-sequence layout decode() relies on
            n_seq_id[i] = 1
            seq_id[i][0] = 0
        self.kv_tokens.extend(roots)
        self._tree = _PendingTree(base, tuple(tokens), tuple(parents), n_seq)
        if rc != 0:
            self.commit_tree(0)
            self.truncate(start)
            raise _decode_error(rc)
        return 1 + len(tokens)

    def commit_tree(self, n_main: int) -> None:
        """Keep the roots and the first ``n_main`` nodes of the main chain of the
        last ``decode_tree``; drop every other node.

        Only main-chain prefixes can be kept. A side branch's cells sit after
        cells the rejected nodes leave free, so keeping one would leave the
        cache's cells out of position order, and this llama.cpp then computes
        wrong attention for some later tree batches (measured: logits off by
        up to 0.9). Callers re-decode an accepted side branch's tokens in the
        next batch instead (see SpeculativeDecoder).
        """
        tree = self._tree
        if tree is None:
            raise RuntimeError("no token tree is pending")
        self._tree = None
        if not 0 <= n_main <= len(tree.tokens) or tree.parents[:n_main] != tuple(
            range(-1, n_main - 1)
        ):
            raise ValueError(f"the first {n_main} nodes are not a chain below the root")
        mem = self._mem
        for s in range(1, tree.n_seq):
            ll.llama_memory_seq_rm(mem, s, -1, -1)
        ll.llama_memory_seq_rm(mem, 0, tree.base + 1 + n_main, -1)
        self.kv_tokens.extend(tree.tokens[:n_main])

    # ----------------------------------------------------------------- tokenizer
    def tokenize(
        self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else text
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


def _decode_error(rc: int) -> DecodeError:
    if rc == 2:
        return DecodeAbortedError("llama_decode was stopped (aborted)")
    reason = {1: "no free KV slot (context full)"}.get(rc, "backend error")
    return DecodeError(f"llama_decode failed with code {rc}: {reason}")


@dataclass(frozen=True, slots=True)
class _PendingTree:
    base: int  # the last root's position
    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    n_seq: int
