"""Where the target's memory goes when RPC workers hold some of its layers.

The layers go where llama.cpp puts them (``gambit.engine.machine.placement``, which
mirrors its rule: the last ``n_gpu_layers`` of the ``n_layer + 1`` layers,
the output layer last, spread over the workers' devices in proportion to the
memory each reports free); the token embeddings always stay on this machine.
Each layer takes its weights and its part of the KV cache along.

The sizes come from the header (``gambit.models.memory``): a repeating
layer's weights are the tensor data less the embeddings (``vocab x n_embd``
at the file's average bytes per parameter), shared evenly; the output layer
is the size of the embeddings (a separate matrix, or the copy llama.cpp makes
of tied embeddings). Every machine that computes layers holds a compute
buffer. This machine keeps the embeddings, the layers left here, the
tokenizer tables (twice: the target's own process and the vocabulary-only
copy that tokenizes), its compute buffer and the whole draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gambit.engine.machine import rpc
from gambit.engine.machine.kernels import KVType
from gambit.engine.machine.placement import placement_for
from gambit.formats.gguf_info import ModelInfo
from gambit.models.memory import estimate_memory, format_size
from gambit.words import counted


@dataclass(frozen=True)
class WorkerMemory:
    """What a probe of one worker said: its devices' memory, or why it cannot be used."""

    endpoint: str
    info: rpc.WorkerInfo | None = None
    error: str | None = None

    @property
    def reachable(self) -> bool:
        return self.info is not None

    @property
    def free(self) -> int:
        return self.info.free if self.info is not None else 0

    @property
    def total(self) -> int:
        return self.info.total if self.info is not None else 0


def probe_workers(endpoints: Sequence[str], timeout: float) -> tuple[WorkerMemory, ...]:
    """Ask each worker for its memory (blocks up to ``timeout`` per step each:
    run it off the UI thread)."""
    found = []
    for endpoint in endpoints:
        try:
            info = rpc.probe(endpoint, timeout)
        except rpc.RpcWorkerError as exc:
            found.append(WorkerMemory(endpoint, error=str(exc)))
        else:
            found.append(WorkerMemory(endpoint, info))
    return tuple(found)


@dataclass(frozen=True)
class WorkerShare:
    """One worker's part of the target: its layers and the memory they need."""

    worker: WorkerMemory
    layers: int  # repeating layers placed there (llama.cpp's count less the output layer)
    output: bool  # the output layer too (the last worker, when it is offloaded)
    bytes: int

    @property
    def fits(self) -> bool:
        return not self.worker.reachable or self.bytes <= self.worker.free


@dataclass(frozen=True)
class MemorySplit:
    """The target spread over the workers and this machine."""

    shares: tuple[WorkerShare, ...]  # the reachable workers, in the settings' order
    unreachable: tuple[WorkerMemory, ...]
    n_layer: int
    local_layers: int  # repeating layers left on this machine
    local_bytes: int  # the target's part here plus the whole draft
    available: int
    problems: tuple[str, ...]  # each reason it will not load or not fit; empty: it fits

    @property
    def fits(self) -> bool:
        return not self.problems


def split_memory(
    target: ModelInfo,
    draft: ModelInfo | None,
    n_ctx: int,
    kv: KVType,
    *,
    worker_layers: int,
    workers: Sequence[WorkerMemory],
    available: int,
) -> MemorySplit:
    """The target's layers over ``workers`` (``worker_layers`` of them, 0: all)
    and what stays here, with every reason it will not fit."""
    est = estimate_memory(target, n_ctx, kv)
    n_layer = max(1, target.block_count)
    embd = _embedding_bytes(target)
    per_layer = max(0, est.weights_bytes - embd) // n_layer + est.kv_bytes // n_layer
    reachable = [w for w in workers if w.info is not None]
    unreachable = tuple(w for w in workers if w.info is None)
    infos = [w.info for w in reachable if w.info is not None]
    placed = placement_for(n_layer, worker_layers, infos, host_free=available)
    # The output layer is the last one offloaded: on the last worker given any.
    last = max((i for i, p in enumerate(placed.workers) if p.layers), default=-1)
    shares = []
    for i, (worker, part) in enumerate(zip(reachable, placed.workers, strict=True)):
        output = i == last
        repeating = part.layers - int(output)
        need = repeating * per_layer + (embd if output else 0)
        need += est.compute_bytes if part.layers else 0
        shares.append(WorkerShare(worker, repeating, output, need))
    local_layers = min(placed.local_layers, n_layer)  # (without workers: the output too)
    local = embd + local_layers * per_layer + est.compute_bytes + 2 * est.overhead_bytes
    if not any(s.output for s in shares):
        local += embd  # the output layer stayed here too
    if draft is not None:
        local += estimate_memory(draft, n_ctx, kv).total_bytes
    problems = [_unreachable_problem(w) for w in unreachable]
    problems += [_share_problem(s) for s in shares if not s.fits]
    if local > available:
        problems.append(
            f"This machine needs about {format_size(local)} ({local_layers} of the target's "
            f"{n_layer} layers, its embeddings and compute buffer"
            f"{', and the draft' if draft is not None else ''}), but only "
            f"{format_size(available)} is available."
        )
    return MemorySplit(
        tuple(shares), unreachable, n_layer, local_layers, local, available, tuple(problems)
    )


def _embedding_bytes(info: ModelInfo) -> int:
    """The token embeddings' share of the weights, at the file's average size per parameter."""
    if info.n_params <= 0:
        return 0
    params = info.vocab_size * info.embedding_length
    return min(info.tensor_bytes, round(info.tensor_bytes * params / info.n_params))


def _unreachable_problem(worker: WorkerMemory) -> str:
    return (
        f"{worker.error} The model will not load while it is missing: start it, or "
        "remove it in Settings → Workers."
    )


def _share_problem(share: WorkerShare) -> str:
    what = counted(share.layers, "layer")
    if share.output:
        what += " and the output layer"
    return (
        f"{share.worker.endpoint} would hold {what}, about {format_size(share.bytes)}, but "
        f"only {format_size(share.worker.free)} is free there."
    )
