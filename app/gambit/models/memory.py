"""How much memory a model will take once loaded, estimated from its header.

What the estimate counts, and how it was calibrated (SmolLM2-135M and
Gemma-3-270M on llama.cpp's CPU backend, as ``ModelRuntime`` loads them):

- **weights**: the tensor data, memory-mapped from the file and read in full
  at load (llama.cpp populates the mapping), so all of it becomes resident.
- **KV cache**: ``2 x n_layer x n_ctx x n_head_kv x head_dim`` elements (K and
  V), at 34/32 bytes per element for Q8_0 (what strict batch invariance
  uses) or 2 for F16. ``n_ctx`` is rounded up to a multiple of 256 as
  llama.cpp does. llama.cpp clears the buffer at creation, so it is resident
  from the start. Matches llama.cpp's "KV buffer size" log line exactly
  (23.91 MiB for SmolLM2 at 2,048 Q8_0; Gemma's sliding-window layers too,
  as contexts get full-size caches by default).
- **compute buffer**: llama.cpp *reserves* room for the worst batch, one of
  ``n_batch`` tokens that all want logits: measured 99.38 MiB for SmolLM2
  (n_batch 512, Q8_0 KV), 514.5 MiB for Gemma; modelled as
  ``4 x n_batch x (n_vocab + 3 x n_embd)`` bytes (both within 0.3 %,
  ``compute_reserved_bytes``). Gambit never asks for logits of a whole
  batch (a prompt needs one row, a verification γ+1 rows), so most of that
  reservation is never touched and never becomes resident: measured RSS
  grows by ~3 MiB decoding single tokens and ~13 MiB (SmolLM2) / ~20 MiB
  (Gemma) for a full 512-token prompt batch. ``compute_bytes`` counts what
  a prompt batch's activations touch, ``4 x n_batch x (4 n_embd + 3 n_ff)``,
  plus ``LOGIT_ROWS`` rows of logits.
- **overhead**: the file's header (mapped with the weights), llama.cpp's
  tokenizer tables (measured ~150 bytes per token and per merge: 15.9 MiB for
  SmolLM2, 36 MiB for Gemma with the header) and ~2 MiB of context
  bookkeeping.

The total is what the process's resident memory grows by; the test checks it
against a measurement (within 15 %).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gambit.engine.machine import devices
from gambit.engine.machine.kernels import KVType
from gambit.formats.gguf_info import ModelInfo

# psutil ships no type hints; imported this way, mypy needs no stubs package.
psutil: Any = importlib.import_module("psutil")

log = logging.getLogger(__name__)

KV_BYTES_PER_ELEMENT: dict[str, float] = {"q8_0": 34 / 32, "f16": 2.0}
CTX_PAD = 256  # llama.cpp rounds the context up to this
LOGIT_ROWS = 16  # logits rows Gambit reads in one decode (a verification batch)
TOKENIZER_BYTES_PER_ENTRY = 150
CONTEXT_FIXED_BYTES = 2 << 20
MIB = 1 << 20


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int  # the part of the compute buffer that becomes resident
    overhead_bytes: int  # header, tokenizer tables, context bookkeeping
    compute_reserved_bytes: int  # llama.cpp's reservation (mostly never touched)
    n_ctx: int
    kv_type: str

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.overhead_bytes

    def __add__(self, other: MemoryEstimate) -> MemoryEstimate:
        return MemoryEstimate(
            weights_bytes=self.weights_bytes + other.weights_bytes,
            kv_bytes=self.kv_bytes + other.kv_bytes,
            compute_bytes=self.compute_bytes + other.compute_bytes,
            overhead_bytes=self.overhead_bytes + other.overhead_bytes,
            compute_reserved_bytes=self.compute_reserved_bytes + other.compute_reserved_bytes,
            n_ctx=max(self.n_ctx, other.n_ctx),
            kv_type=self.kv_type,
        )


def kv_cache_bytes(info: ModelInfo, n_ctx: int, kv_type: KVType = "q8_0") -> int:
    if kv_type not in KV_BYTES_PER_ELEMENT:
        raise ValueError(f"unknown KV cache type {kv_type!r}")
    cells = -(-n_ctx // CTX_PAD) * CTX_PAD
    per_cell = info.head_count_kv * (info.key_length + info.value_length)
    return int(info.block_count * cells * per_cell * KV_BYTES_PER_ELEMENT[kv_type])


def estimate_memory(
    info: ModelInfo, n_ctx: int, kv_type: KVType = "q8_0", n_batch: int = 512
) -> MemoryEstimate:
    """Resident memory of ``info`` loaded with a context of ``n_ctx`` tokens."""
    if n_ctx <= 0:
        raise ValueError("the context size must be positive")
    n_batch = min(n_batch, n_ctx)
    n_embd, n_ff, n_vocab = info.embedding_length, info.feed_forward_length, info.vocab_size
    activations = 4 * n_batch * (4 * n_embd + 3 * n_ff)
    logits = 4 * n_vocab * min(LOGIT_ROWS, n_batch)
    tokenizer = TOKENIZER_BYTES_PER_ENTRY * (info.vocab_size + info.n_merges)
    return MemoryEstimate(
        weights_bytes=info.tensor_bytes,
        kv_bytes=kv_cache_bytes(info, n_ctx, kv_type),
        compute_bytes=activations + logits,
        overhead_bytes=info.header_bytes + tokenizer + CONTEXT_FIXED_BYTES,
        compute_reserved_bytes=4 * n_batch * (n_vocab + 3 * n_embd),
        n_ctx=n_ctx,
        kv_type=kv_type,
    )


# A draft must read at least this share fewer bytes per token than its target
# to pay for its rejected guesses (gambit.models.derive_advice).
MIN_DRAFT_SAVING = 0.25


def bytes_read_per_token(tensor_bytes: Mapping[str, int]) -> int:
    """Bytes of weights one decoding step streams, from each tensor's size.

    A step multiplies by every weight matrix once, except the token
    embeddings, of which it reads one row, unless the model has no separate
    output matrix and multiplies by the embeddings instead (tied embeddings,
    as SmolLM2 and Gemma have). On the memory-bound hardware drafts are for,
    a step's time follows this figure.
    """
    tied = "output.weight" not in tensor_bytes
    return sum(n for name, n in tensor_bytes.items() if tied or name != "token_embd.weight")


def available_memory() -> int:
    """Bytes of RAM available to a new allocation without swapping (psutil's estimate)."""
    return int(psutil.virtual_memory().available)


@dataclass(frozen=True)
class GpuMemory:
    name: str
    free_bytes: int
    total_bytes: int


def gpu_memory() -> list[GpuMemory]:
    """Free/total memory of each GPU llama.cpp can use; empty on a CPU-only build."""
    try:
        gpus = devices.gpu_devices()
    except (OSError, AttributeError) as exc:
        log.debug("no GPU memory information: %s", exc)
        return []
    return [GpuMemory(d.name, d.memory.free, d.memory.total) for d in gpus]


def check_fits(
    target: ModelInfo,
    draft: ModelInfo | None,
    n_ctx: int,
    *,
    kv_type: KVType = "q8_0",
    gpu_layers: int = 0,
    available: int | None = None,
) -> str | None:
    """A warning when the target (and draft) at ``n_ctx`` will not fit in memory, else None.

    With ``gpu_layers`` (-1: all) the offloaded share of weights and KV cache is
    checked against the GPUs' free memory instead, when llama.cpp sees a GPU.
    """
    models = [target] + ([draft] if draft is not None else [])
    est = estimate_memory(target, n_ctx, kv_type)
    if draft is not None:
        est = est + estimate_memory(draft, n_ctx, kv_type)
    names = " and ".join(m.path.name for m in models)
    gpus = gpu_memory() if gpu_layers != 0 else []
    ram_needed = est.total_bytes
    if gpus:
        share = 1.0
        if gpu_layers > 0:
            share = min(1.0, gpu_layers / max(1, max(m.block_count for m in models)))
        vram_needed = int(share * (est.weights_bytes + est.kv_bytes)) + est.compute_bytes
        vram_free = sum(g.free_bytes for g in gpus)
        ram_needed -= int(share * (est.weights_bytes + est.kv_bytes))
        if vram_needed > vram_free:
            return (
                f"{names} at {n_ctx:,} tokens of context need about {format_size(vram_needed)} of "
                f"GPU memory, but only {format_size(vram_free)} is free. Offload fewer layers, "
                "choose a smaller context or a smaller model."
            )
    free = available if available is not None else available_memory()
    if ram_needed > free:
        return (
            f"{names} at {n_ctx:,} tokens of context need about {format_size(ram_needed)} of "
            f"memory, but only {format_size(free)} is available. Close other programs, choose a "
            "smaller context or a smaller model (or a smaller draft)."
        )
    return None


def format_size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / MIB:.0f} MiB"
