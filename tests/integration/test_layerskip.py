"""Layer-skip self-drafts on real weights: the written file is the target minus
the skipped blocks (byte for byte), loads in llama.cpp, says where it came
from; the search's numbers hang together; the draft is cached per target file;
the CLI runs end to end."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from gambit.engine.drafters.draft_model import check_compatible
from gambit.engine.gamma.policy import DEFAULT_GAMMA_MAX
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.errors import ModelNotFoundError, NotGGUFError
from gambit.formats.gguf_file import read_header
from gambit.formats.gguf_info import inspect_model
from gambit.formats.layerskip_file import (
    LayerSkipCancelledError,
    LayerSkipError,
    LayerSkipInfo,
    read_layer_skip_info,
    write_layer_skip_model,
)
from gambit.models.layerskip import (
    MIN_DRAFT_SAVING,
    LayerSkipResult,
    draft_path_for,
    ensure_layer_skip_draft,
    search_layer_skip,
)
from gambit.models.library import ModelLibrary

# Both cores: the suite runs one test at a time, and no assertion here reads a
# clock (the search's choices are checked for consistency, not for speed).
OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=2)
PROMPTS = ["Explain in simple words what photosynthesis is."]
TEXT = "The capital of France is Paris. The capital of Germany is Berlin. " * 30


def _logits(path: Path, tokens: list[int], n_rows: int = 8) -> np.ndarray:
    """The last ``n_rows`` rows of logits for ``tokens`` (decoded in two batches)."""
    with ModelRuntime(path, OPTIONS) as rt:
        rt.decode(tokens[:-n_rows])
        rt.decode(tokens[-n_rows:], all_logits=True)
        return rt.logits_rows(n_rows).copy()


def _tokens(path: Path, n: int) -> list[int]:
    with ModelRuntime(path, OPTIONS) as rt:
        return rt.tokenize(TEXT)[:n]


def _tensor_bytes(path: Path) -> dict[str, bytes]:
    header = read_header(path)
    with path.open("rb") as f:
        out = {}
        for t in header.tensors:
            f.seek(header.data_offset + t.offset)
            out[t.name] = f.read(t.n_bytes)
    return out


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


# ------------------------------------------------------------------- writing


def test_skipping_nothing_gives_the_same_model(tmp_path: Path, smol_q4_1: Path) -> None:
    dst = write_layer_skip_model(smol_q4_1, tmp_path / "same.gguf", ())
    tokens = _tokens(smol_q4_1, 300)
    assert np.array_equal(_logits(smol_q4_1, tokens), _logits(dst, tokens))
    info = read_layer_skip_info(dst)
    assert info == LayerSkipInfo((), 30, smol_q4_1.name)
    assert info.describe() == "skips no block of 30"
    assert read_layer_skip_info(smol_q4_1) is None  # an ordinary model
    # Every metadata entry comes through, byte for byte where nothing changes
    # it: the vocabulary, merges and template as the source stores them.
    written = read_header(dst).metadata
    provenance = {k for k in written if k.startswith("gambit.layer_skip.")}
    assert provenance >= {"gambit.layer_skip.source", "gambit.layer_skip.source_blocks"}
    assert {k: v for k, v in written.items() if k not in provenance} == read_header(
        smol_q4_1
    ).metadata
    assert _leftovers(tmp_path) == ["same.gguf"]


def test_skipped_blocks_are_gone_and_the_rest_renumbered(tmp_path: Path, smol_q4_1: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    dst = write_layer_skip_model(
        smol_q4_1, tmp_path / "skip3.gguf", [20, 5, 12], progress=lambda *a: seen.append(a)
    )
    assert seen[-1][0] == "writing the draft" and seen[-1][1] == seen[-1][2]
    info = read_layer_skip_info(dst)
    assert info == LayerSkipInfo((5, 12, 20), 30, smol_q4_1.name)
    assert info.kept == 27
    assert info.describe() == "skips blocks 5, 12, 20 of 30"
    assert inspect_model(dst).block_count == 27

    # tensors copied byte for byte, kept blocks renumbered in order
    src_t, dst_t = _tensor_bytes(smol_q4_1), _tensor_bytes(dst)
    kept = [i for i in range(30) if i not in (5, 12, 20)]
    expected = {name: data for name, data in src_t.items() if not name.startswith("blk.")}
    for new, old in enumerate(kept):
        prefix = f"blk.{old}."
        for name, data in src_t.items():
            if name.startswith(prefix):
                expected[f"blk.{new}.{name[len(prefix) :]}"] = data
    assert dst_t == expected

    header = read_header(smol_q4_1)
    dropped = sum(
        math.prod(t.shape)
        for t in header.tensors
        if t.name.split(".")[:2] in (["blk", "5"], ["blk", "12"], ["blk", "20"])
    )
    with ModelRuntime(smol_q4_1, OPTIONS) as target, ModelRuntime(dst, OPTIONS) as draft:
        assert draft.n_params == target.n_params - dropped
        check_compatible(target, draft)  # same tokenizer: it can draft for the target
        draft.decode(draft.tokenize(TEXT)[:40])
        assert np.isfinite(draft.logits(-1)).all()

    # a draft of the draft: indices compose back to the first source
    again = write_layer_skip_model(dst, tmp_path / "skip4.gguf", [5])  # its block 5 is block 6
    assert read_layer_skip_info(again) == LayerSkipInfo((5, 6, 12, 20), 30, smol_q4_1.name)
    assert inspect_model(again).block_count == 26
    assert _leftovers(tmp_path) == ["skip3.gguf", "skip4.gguf"]


def test_gemma3_keeps_its_sliding_window_layers(tmp_path: Path, gemma_q4_k_m: Path) -> None:
    """Gemma-3 makes every 6th layer global by its index; renumbered blocks keep
    their own kind through an explicit per-layer pattern. Past 512 tokens of
    context (the window) a wrong pattern changes the logits."""
    same = write_layer_skip_model(gemma_q4_k_m, tmp_path / "same.gguf", ())
    tokens = _tokens(gemma_q4_k_m, 700)
    assert np.array_equal(_logits(gemma_q4_k_m, tokens), _logits(same, tokens))
    dst = write_layer_skip_model(gemma_q4_k_m, tmp_path / "skip.gguf", [3, 7])
    key = "gemma3.attention.sliding_window_pattern"
    pattern = read_header(dst, keep_arrays=(key,)).metadata[key]
    original = [i % 6 < 5 for i in range(18)]  # llama.cpp's default for gemma3: 5 local, 1 global
    assert pattern == [original[i] for i in range(18) if i not in (3, 7)]
    assert read_layer_skip_info(dst) == LayerSkipInfo((3, 7), 18, gemma_q4_k_m.name)
    assert np.isfinite(_logits(dst, tokens[:40])).all()


def test_bad_inputs_are_refused_and_leave_no_file(tmp_path: Path, smol_q4_1: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(LayerSkipError, match="cannot skip all 30 blocks"):
        write_layer_skip_model(smol_q4_1, out / "x.gguf", range(30))
    with pytest.raises(LayerSkipError, match=r"block 30 is out of range: .* blocks 0 to 29"):
        write_layer_skip_model(smol_q4_1, out / "x.gguf", [3, 30])
    with pytest.raises(LayerSkipError, match="block -1 is out of range"):
        write_layer_skip_model(smol_q4_1, out / "x.gguf", [-1])
    with pytest.raises(LayerSkipError, match="would overwrite its source"):
        write_layer_skip_model(smol_q4_1, smol_q4_1, [3])

    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    with pytest.raises(NotGGUFError, match="not a GGUF model file"):
        write_layer_skip_model(text, out / "x.gguf", [1])
    with pytest.raises(NotGGUFError):
        read_layer_skip_info(text)
    with pytest.raises(ModelNotFoundError):
        read_layer_skip_info(tmp_path / "missing.gguf")

    # a GGUF without blk.N tensors (an embedding table alone)
    flat = tmp_path / "flat.gguf"
    writer = gguf.GGUFWriter(flat, "llama")
    writer.add_block_count(4)
    writer.add_tensor("token_embd.weight", np.zeros((10, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(LayerSkipError, match=r"no blk\.N layout"):
        write_layer_skip_model(flat, out / "x.gguf", [1])

    # cancelled while writing: no partial file
    cancel = threading.Event()

    def progress(_stage: str, done: int, _total: int) -> None:
        cancel.set()

    with pytest.raises(LayerSkipCancelledError, match="cancelled"):
        write_layer_skip_model(smol_q4_1, out / "x.gguf", [1], progress, cancel=cancel)
    assert not out.exists() or _leftovers(out) == []
    assert _leftovers(tmp_path) == ["flat.gguf", "notes.gguf"]


# -------------------------------------------------------------------- search


def test_search_plan_is_consistent(tmp_path: Path, smol_q4_1: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    plan = search_layer_skip(
        smol_q4_1,
        prompts=PROMPTS,
        options=OPTIONS,
        max_evaluations=4,
        progress=lambda *a: seen.append(a),
        workdir=tmp_path,
        n_tokens=24,
    )
    assert _leftovers(tmp_path) == []  # candidates are deleted
    assert plan.source_name == smol_q4_1.name and plan.source_blocks == 30
    assert 1 <= len(plan.candidates) <= 4
    assert 0 < plan.n_positions <= 24
    assert plan.skipped in [c.skipped for c in plan.candidates]
    for c in plan.candidates:
        assert 0.0 <= c.acceptance <= 1.0
        assert 0 not in c.skipped and 29 not in c.skipped  # first and last always kept
        assert 0 < c.draft_cost_ratio <= 1.0
        assert c.measured_cost_ratio > 0
        assert 1 <= c.best_gamma <= 8
        assert plan.expected_speedup >= c.expected_speedup
        assert c.stage in ("single", "prefix", "refine")
    # a budget of 4 measures 3 single blocks, evenly spread, then combines them
    singles = [c.skipped for c in plan.candidates if c.stage == "single"]
    assert singles == [(1,), (15,), (28,)]
    assert plan.verify_cost[0] == 1.0 and len(plan.verify_cost) == DEFAULT_GAMMA_MAX + 1
    assert plan.summary().startswith(plan.info.describe())
    # its verdict in words: none only when drafting with it pays and saves enough
    saves = plan.draft_cost_ratio <= 1.0 - MIN_DRAFT_SAVING
    assert (plan.refusal() is None) == (plan.pays and saves)
    stages = [s for s, _, _ in seen]
    assert stages[0] == "generating reference text"
    assert "measuring block 15 of 30" in stages and stages[-1] == "done"


def test_search_cancelled(tmp_path: Path, smol_q4_1: Path) -> None:
    stop = threading.Event()

    def progress(stage: str, _done: int, _total: int) -> None:
        if stage == "measuring the target's own copy":
            stop.set()  # before the first file is written

    with pytest.raises(LayerSkipCancelledError):
        search_layer_skip(
            smol_q4_1,
            prompts=PROMPTS,
            options=OPTIONS,
            max_evaluations=3,
            progress=progress,
            cancel=stop,
            workdir=tmp_path,
            n_tokens=8,
        )
    assert _leftovers(tmp_path) == []


# --------------------------------------------------------------------- cache


def test_ensure_caches_per_target_file(tmp_path: Path, smol_q4_1: Path) -> None:
    target = tmp_path / "target.Q4_1.gguf"
    shutil.copyfile(smol_q4_1, target)
    lib = ModelLibrary(tmp_path / "data" / "library.json", tmp_path / "data" / "models")

    def ensure(**kwargs: Any) -> LayerSkipResult:
        return ensure_layer_skip_draft(
            target, library=lib, options=OPTIONS, max_evaluations=1, prompts=PROMPTS,
            n_tokens=8, **kwargs,
        )  # fmt: skip

    first = ensure()
    assert not first.from_cache
    assert first.path == lib.models_dir / "target.Q4_1.layerskip.gguf"
    assert first.path == draft_path_for(target, lib.models_dir)
    assert first.info == first.plan.info == read_layer_skip_info(first.path)
    entry = lib.get(first.path)
    assert entry is not None and entry.origin == "derived"
    assert entry.draft_for == (str(target.resolve()),)
    assert sorted(p.name for p in lib.models_dir.iterdir()) == [
        "target.Q4_1.layerskip.gguf",
        "target.Q4_1.layerskip.json",
    ]

    stages: list[str] = []
    second = ensure(progress=lambda stage, *_: stages.append(stage))
    assert second.from_cache and stages == []  # no search
    assert second.path == first.path and second.plan == first.plan

    # the target changes: the cached draft no longer describes it
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    third = ensure()
    assert not third.from_cache and third.path == first.path
    assert ensure().from_cache

    # cancelled: the cached draft stays as it was, nothing half-written appears
    with pytest.raises(LayerSkipCancelledError):
        ensure(force=True, cancel=lambda: True)
    assert sorted(p.name for p in lib.models_dir.iterdir()) == [
        "target.Q4_1.layerskip.gguf",
        "target.Q4_1.layerskip.json",
    ]
    assert ensure().from_cache


# ----------------------------------------------------------------------- CLI


def _cli(*args: str | Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "gambit", "models", "layerskip", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_cli_layerskip(tmp_path: Path, smol_q4_1: Path) -> None:
    home = tmp_path / "home"
    proc = _cli(smol_q4_1, "--max-evals", "2", "--threads", "2", home=home)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["SKIPPED", "KEPT", "ACCEPTANCE"]
    rows = lines[1:3]  # a budget of 2: two single blocks
    assert all(re.match(r"\*?\d+(, \d+)*\s+\d+/30\s+[\d.]+%", row) for row in rows), lines
    assert sum(row.startswith("*") for row in rows) == 1
    chosen = next(line for line in lines if line.startswith("chosen: "))
    assert re.search(r"skips blocks? [\d, ]+ of 30 \(\d+ kept\): acceptance [\d.]+%", chosen)
    draft = home / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.layerskip.gguf"
    assert f"draft: {draft} (written;" in proc.stdout
    assert "layerskip: measuring block" in proc.stderr  # progress, a line per stage

    proc = _cli(smol_q4_1, "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["from_cache"] is True and data["path"] == str(draft)
    assert len(data["plan"]["candidates"]) == 2

    proc = _cli(smol_q4_1, "--max-evals", "0", home=home)
    assert proc.returncode == 2 and "must be a whole number of 1 or more" in proc.stderr
    proc = _cli(tmp_path / "missing.gguf", home=home)
    assert proc.returncode == 2 and "model file not found" in proc.stderr
