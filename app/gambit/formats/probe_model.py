"""A kernel-probe miniature: a model's own tensors, with a few of its blocks.

Which llama.cpp kernels run a model, whether its batched and single-token
logits agree, and which configuration is faster depend on the tensors'
weight types and shapes and on the CPU, not on how many times the blocks
repeat. The kernel probe (``gambit.engine.machine.kernels``) loads and runs the
model once per configuration, which for a 1.8 GB target took 33 s; on a
miniature of it (every tensor outside the blocks, one block of each tensor
layout, and as many more as make the blocks' bytes a quarter of the rest's,
so that the speed ranking still weighs them) it takes a few.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from gambit.formats.gguf_blocks import BLOCK_RE, BlockModel
from gambit.formats.gguf_file import read_header

# A miniature is written only when it reads at most this share of the model's bytes.
WORTH_BELOW = 0.5
# Its blocks hold at least this share of the bytes of the tensors outside the
# blocks (the output matrix, which every token reads, is among those).
BLOCK_SHARE = 0.25


def probe_plan(model: BlockModel) -> list[int]:
    """The blocks a miniature of ``model`` keeps, ascending: the first block
    of each tensor layout, then the next ones in order until the blocks hold
    ``BLOCK_SHARE`` of the bytes of the tensors outside them."""
    first: dict[object, int] = {}
    for block, layout in sorted(model.block_layouts().items()):
        first.setdefault(layout, block)
    plan = set(first.values())
    mean_block = sum(model.block_bytes) / max(1, model.n_blocks)
    wanted = math.ceil(BLOCK_SHARE * model.other_bytes / mean_block) if mean_block else 0
    for block in range(model.n_blocks):
        if len(plan) >= wanted:
            break
        plan.add(block)
    return sorted(plan)


@dataclass(frozen=True)
class Miniature:
    path: Path
    blocks: int
    source_blocks: int

    def describe(self) -> str:
        return f"a miniature of {self.blocks} of its {self.source_blocks} blocks"


def write_probe_model(src: Path, dst: Path) -> Miniature | None:
    """Write the miniature of ``src`` to ``dst``; None (nothing written) where
    it would not be much smaller than the model itself."""
    model = BlockModel(src)
    plan = probe_plan(model)
    size = model.other_bytes + sum(model.block_bytes[i] for i in plan)
    if size > WORTH_BELOW * (model.other_bytes + sum(model.block_bytes)):
        return None
    model.write_plan(dst, plan, durable=False, stage="writing the probe's miniature")
    return Miniature(dst, len(plan), model.n_blocks)


def layout_digest(path: Path) -> str:
    """What the probe's answer depends on in ``path``, as a digest: the
    architecture, its hyper-parameters and every distinct tensor layout (name
    within a block, weight type, shape). Not the depth, the weights' values,
    the tokenizer or the chat template: a fine-tune, a model with another
    template or a cost-scaled copy shares the verdict of its original."""
    header = read_header(path)
    arch = header.architecture
    hparams = sorted(
        (key, repr(value))
        for key, value in header.metadata.items()
        if key.startswith(f"{arch}.") and key != f"{arch}.block_count"
    )
    tensors = set()
    for t in header.tensors:
        m = BLOCK_RE.match(t.name)
        tensors.add((m.group(2) if m else t.name, t.ggml_type, t.shape))
    text = json.dumps([arch, hparams, sorted(tensors)])
    return hashlib.sha256(text.encode()).hexdigest()
