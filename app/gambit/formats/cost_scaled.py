"""A cost-scaled target: a model with the weight traffic of a bigger one and its own outputs.

Every pair that can be built from the small models this project can get drafts
with the target's own network, so a draft step costs 0.2-0.6 of a target step;
a real pair (a 0.5B draft for a 7B target) drafts for under a tenth. Such a
pair is built exactly by appending blocks to the target whose output
projections (``attn_output``, ``ffn_down``, and their biases) are zero: each
added block still reads its weights and keeps its KV cache for every token,
but adds nothing to the residual stream, so the logits are the original
model's (measured: max |Δlogit| = 0.0 with the same llama.cpp settings).

The benchmark derives these into its cache (``gambit-cli bench --regimes``,
targets such as "F32x4"); they are never put in the user's model library.
"""

from __future__ import annotations

import re
from pathlib import Path

import gguf

from gambit.formats.gguf_blocks import BlockLayoutError, BlockModel
from gambit.fsutil import Progress

KEY_SOURCE = "gambit.cost_scaled.source"
KEY_SOURCE_BLOCKS = "gambit.cost_scaled.source_blocks"
MULTIPLE_MAX = 16

# The tensors that write a block's result into the residual stream.
_OUTPUT_PROJECTION = re.compile(r"^(attn_output|ffn_down(_exps|_shexp)?)\.(weight|bias)$")


def scaled_plan(n_blocks: int, multiple: int) -> list[int]:
    """Source block of each block of the scaled model: the original stack,
    then ``multiple - 1`` copies of it (whose outputs are zeroed)."""
    return [j % n_blocks for j in range(n_blocks * multiple)]


def write_cost_scaled(
    src: Path, dst: Path, multiple: int, progress: Progress | None = None
) -> Path:
    """Write ``src`` with ``multiple`` times its blocks to ``dst``, the added
    ones with zero output projections (see the module docstring)."""
    if not 2 <= multiple <= MULTIPLE_MAX:
        raise BlockLayoutError(f"the block multiple must be 2 to {MULTIPLE_MAX}, not {multiple}")
    model = BlockModel(src)
    n = model.n_blocks
    for block, layout in model.block_layouts().items():
        projections = [name for name, _, _ in layout if _OUTPUT_PROJECTION.match(name)]
        attention = any(p.startswith("attn_output.") for p in projections)
        feed_forward = any(p.startswith("ffn_down") for p in projections)
        if not (attention and feed_forward):
            raise BlockLayoutError(
                f"{src.name}: block {block} has no attention and feed-forward output "
                "projections to zero, so added blocks would change its outputs"
            )
    vt = gguf.GGUFValueType
    name = model.value("general.name")
    label = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name or src.stem)
    extra = [
        ("general.name", vt.STRING, None, f"{label} (cost-scaled x{multiple})"),
        (KEY_SOURCE, vt.STRING, None, src.name),
        (KEY_SOURCE_BLOCKS, vt.UINT32, None, n),
    ]
    return model.write_plan(
        dst,
        scaled_plan(n, multiple),
        zeroed=lambda j, tensor: j >= n and bool(_OUTPUT_PROJECTION.match(tensor)),
        extra=extra,
        drop_prefix="general.name",
        progress=progress,
        stage="writing the cost-scaled target",
    )
