"""The target's memory split over RPC workers and this machine (models.memory_split).

A hand-made header of a 30-block model whose sizes are round numbers, so each
share can be worked out here: the layer counts follow llama.cpp's rule
(engine.machine.placement), the bytes follow models.memory's estimate.
"""

from __future__ import annotations

import socket
from pathlib import Path

from gambit.engine.machine.devices import DeviceMemory
from gambit.engine.machine.rpc import WorkerInfo
from gambit.formats.gguf_info import ModelInfo
from gambit.models.memory import estimate_memory
from gambit.models.memory_split import WorkerMemory, probe_workers, split_memory

GIB = 1024**3
MIB = 1024**2
N_CTX = 2048


def model(name: str = "target.gguf", blocks: int = 30, params: int = 1_000_000_000) -> ModelInfo:
    """A model whose embeddings (50,000 x 2,000 = 10 % of the parameters) are 100 MiB."""
    return ModelInfo(
        path=Path(name), name=name, architecture="llama", n_params=params,
        quantization="Q8_0", file_size=1000 * MIB + 4 * MIB, tensor_bytes=1000 * MIB,
        header_bytes=4 * MIB, vocab_size=50_000, vocab_type="gpt2", tokenizer_pre="",
        n_merges=0, context_length=8192, block_count=blocks, embedding_length=2000,
        feed_forward_length=5000, head_count=16, head_count_kv=4, key_length=128,
        value_length=128, has_chat_template=True, tokenizer_digest="d", add_bos=False,
        add_eos=False, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip


def worker(endpoint: str, free: int) -> WorkerMemory:
    return WorkerMemory(endpoint, WorkerInfo(endpoint, (7, 0, 0), (DeviceMemory(free, free),)))


TARGET = model()
EST = estimate_memory(TARGET, N_CTX)
EMBD = 100 * MIB
PER_LAYER = (EST.weights_bytes - EMBD) // 30 + EST.kv_bytes // 30


def test_all_layers_split_by_free_memory_and_only_the_embeddings_stay() -> None:
    a, b = worker("10.0.0.2:50052", 3 * GIB), worker("10.0.0.3:50052", 1 * GIB)
    split = split_memory(
        TARGET, None, N_CTX, "q8_0", worker_layers=0, workers=[a, b], available=8 * GIB
    )
    # 31 layers (30 blocks + output) at split point 0.75: layers 0..23 to a, 24..30 to b
    assert [(s.worker.endpoint, s.layers, s.output) for s in split.shares] == [
        ("10.0.0.2:50052", 24, False),
        ("10.0.0.3:50052", 6, True),
    ]
    assert split.shares[0].bytes == 24 * PER_LAYER + EST.compute_bytes
    assert split.shares[1].bytes == 6 * PER_LAYER + EMBD + EST.compute_bytes
    assert split.local_layers == 0
    assert split.local_bytes == EMBD + EST.compute_bytes + 2 * EST.overhead_bytes
    assert split.fits and split.problems == ()


def test_some_layers_on_a_worker_and_the_rest_here_with_the_draft() -> None:
    draft = model("draft.gguf", blocks=8, params=200_000_000)
    one = [worker("10.0.0.2:50052", 4 * GIB)]
    alone = split_memory(TARGET, None, N_CTX, "q8_0", worker_layers=10, workers=one,
                         available=8 * GIB)  # fmt: skip
    both = split_memory(TARGET, draft, N_CTX, "q8_0", worker_layers=10, workers=one,
                        available=8 * GIB)  # fmt: skip
    # the last 10 of 31 layers: 9 blocks and the output layer; 21 blocks stay
    (share,) = alone.shares
    assert (share.layers, share.output, alone.local_layers) == (9, True, 21)
    assert alone.local_bytes == (EMBD + 21 * PER_LAYER + EST.compute_bytes + 2 * EST.overhead_bytes)
    # the draft stays here, whole
    assert both.local_bytes - alone.local_bytes == estimate_memory(draft, N_CTX).total_bytes
    assert both.shares == alone.shares


def test_a_worker_without_enough_free_memory_is_named() -> None:
    small = worker("10.0.0.9:50052", 200 * MIB)
    split = split_memory(
        TARGET, None, N_CTX, "q8_0", worker_layers=0, workers=[small], available=8 * GIB
    )
    assert not split.fits
    (problem,) = split.problems
    assert problem.startswith("10.0.0.9:50052 would hold 30 layers and the output layer")
    assert "only 200 MiB is free there" in problem


def test_an_unreachable_worker_is_said_and_the_others_take_its_layers() -> None:
    gone = WorkerMemory("10.0.0.5:50052", error="No worker answers at 10.0.0.5:50052.")
    split = split_memory(
        TARGET, None, N_CTX, "q8_0", worker_layers=0,
        workers=[gone, worker("10.0.0.2:50052", 4 * GIB)], available=8 * GIB,
    )  # fmt: skip
    assert split.unreachable == (gone,)
    assert [(s.layers, s.output) for s in split.shares] == [(30, True)]
    (problem,) = split.problems
    assert problem.startswith("No worker answers at 10.0.0.5:50052.")
    assert "will not load while it is missing" in problem


def test_local_memory_short_is_said() -> None:
    split = split_memory(
        TARGET, None, N_CTX, "q8_0", worker_layers=5,
        workers=[worker("10.0.0.2:50052", 4 * GIB)], available=100 * MIB,
    )  # fmt: skip
    (problem,) = split.problems
    assert problem.startswith("This machine needs about ")
    assert "26 of the target's 30 layers" in problem and "only 100 MiB is available" in problem


def test_no_worker_answers_keeps_everything_here() -> None:
    gone = WorkerMemory("10.0.0.5:50052", error="No worker answers at 10.0.0.5:50052.")
    split = split_memory(
        TARGET, None, N_CTX, "q8_0", worker_layers=0, workers=[gone], available=8 * GIB
    )
    assert split.shares == () and split.local_layers == 30
    assert split.local_bytes == (
        2 * EMBD + 30 * PER_LAYER + EST.compute_bytes + 2 * EST.overhead_bytes
    )
    assert len(split.problems) == 1


def test_probe_of_a_closed_port_says_why() -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
        (found,) = probe_workers([endpoint], timeout=2.0)
    assert not found.reachable and found.free == 0
    assert found.error is not None and endpoint in found.error and "refused" in found.error
