"""Cost-scaled targets and kernel-probe miniatures, written from real weights.

A cost-scaled target appends blocks whose output projections are zero: the
logits must be the original model's exactly, while every token reads the
added weights. A probe miniature keeps every tensor layout with fewer blocks.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gambit.engine.machine.kernels import EXACT, KernelProbe
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.formats.cost_scaled import KEY_SOURCE_BLOCKS, write_cost_scaled
from gambit.formats.gguf_blocks import BlockLayoutError, BlockModel
from gambit.formats.gguf_file import read_header
from gambit.formats.probe_model import probe_plan

OPTIONS = RuntimeOptions(n_ctx=128, n_threads=2, kernels=EXACT)
PROMPT = "The capital of France is Paris, and the capital of Italy is"


@pytest.fixture(scope="module")
def scaled_q8_0(tmp_path_factory: pytest.TempPathFactory, smol_q8_0: Path) -> Path:
    dst = tmp_path_factory.mktemp("scaled") / "smol.Q8_0x2.gguf"
    return write_cost_scaled(smol_q8_0, dst, 2)


def _logits(path: Path) -> np.ndarray:
    with ModelRuntime(path, OPTIONS) as rt:
        tokens = rt.tokenize(PROMPT)
        rows = rt.decode(tokens, all_logits=True)
        return rt.logits_rows(rows).copy()


def test_a_cost_scaled_target_has_the_original_logits(smol_q8_0: Path, scaled_q8_0: Path) -> None:
    header = read_header(scaled_q8_0)
    assert header.metadata["llama.block_count"] == 60
    assert header.metadata[KEY_SOURCE_BLOCKS] == 30
    # Twice the blocks' weights to read for every token, the same tensors around them.
    original, scaled = BlockModel(smol_q8_0), BlockModel(scaled_q8_0)
    assert sum(scaled.block_bytes) == 2 * sum(original.block_bytes)
    assert scaled.other_bytes == original.other_bytes
    expected, got = _logits(smol_q8_0), _logits(scaled_q8_0)
    assert expected.shape == got.shape
    assert float(np.abs(expected - got).max()) == 0.0


def test_scaling_refuses_what_it_cannot_do(smol_q8_0: Path, tmp_path: Path) -> None:
    with pytest.raises(BlockLayoutError, match="multiple must be 2 to 16"):
        write_cost_scaled(smol_q8_0, tmp_path / "x.gguf", 1)
    assert list(tmp_path.iterdir()) == []


def test_the_probe_runs_on_a_miniature_with_every_layout(scaled_q8_0: Path) -> None:
    model = BlockModel(scaled_q8_0)
    plan = probe_plan(model)
    layouts = model.block_layouts()
    assert {layouts[i] for i in plan} == set(layouts.values())
    assert len(plan) < model.n_blocks // 4
    folder = Path(tempfile.gettempdir()) / "probe-models"
    verdict = KernelProbe(None).verdict(scaled_q8_0, 2, 0, 5)
    assert verdict.probed_on == f"a miniature of {len(plan)} of its 60 blocks"
    exact = verdict.result(EXACT)
    assert exact is not None and exact.ok and exact.batch_invariant
    # The miniature was a scratch file: gone once the probe answered.
    leftovers = list(folder.glob(f"*.{os.getpid()}-*.probe.gguf")) if folder.is_dir() else []
    assert leftovers == []
