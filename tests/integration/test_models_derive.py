"""Deriving a draft from a target with llama.cpp's quantizer, in a child process:
the result pairs with the target and loads, is registered in the library,
cancelling leaves no partial file, and a full disk is refused up front."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gambit.engine.drafters.draft_model import check_compatible
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.errors import GambitError
from gambit.formats.gguf_file import read_header
from gambit.formats.gguf_info import inspect_model
from gambit.fsutil import check_disk_space
from gambit.models.derive import (
    DeriveCancelledError,
    derive_draft,
    derived_name,
    estimate_output_size,
    measure_acceptance,
)
from gambit.models.library import ModelLibrary
from gambit.models.pairing import pair_report

SMALL = RuntimeOptions(n_ctx=256, n_threads=1)


@pytest.fixture
def lib(tmp_path: Path) -> ModelLibrary:
    return ModelLibrary(tmp_path / "data" / "library.json", tmp_path / "data" / "models")


@pytest.fixture(scope="module")
def derived(
    tmp_path_factory: pytest.TempPathFactory, smol_q8_0: Path
) -> tuple[Path, ModelLibrary, float, list[tuple[str, int, int]]]:
    home = tmp_path_factory.mktemp("derive")
    lib = ModelLibrary(home / "library.json", home / "models")
    seen: list[tuple[str, int, int]] = []
    t0 = time.perf_counter()
    path = derive_draft(smol_q8_0, "Q4_0", progress=lambda *a: seen.append(a), library=lib)
    return path, lib, time.perf_counter() - t0, seen


def test_derived_draft_pairs_loads_and_is_registered(
    derived: tuple[Path, ModelLibrary, float, list[tuple[str, int, int]]], smol_q8_0: Path
) -> None:
    path, lib, _elapsed, seen = derived
    assert path == lib.models_dir / "SmolLM2-135M-Instruct.Q4_0.gguf"
    info = inspect_model(path)
    assert info.quantization == "Q4_0"
    assert info.file_size < inspect_model(smol_q8_0).file_size
    # the estimate the progress and the disk check used is exact for Q4_0
    assert estimate_output_size(read_header(smol_q8_0), "Q4_0") == info.file_size
    # progress: from 0 to the final size, never backwards
    assert seen[0] == ("quantizing", 0, info.file_size)
    assert seen[-1] == ("quantizing", info.file_size, info.file_size)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
    # compatible by the header rules and by llama.cpp's, and it loads and runs
    assert pair_report(inspect_model(smol_q8_0), info).compatible
    with ModelRuntime(smol_q8_0, SMALL) as target, ModelRuntime(path, SMALL) as draft:
        check_compatible(target, draft)
        draft.decode(draft.tokenize("Hello"))
        assert 0 <= int(draft.logits(-1).argmax()) < draft.n_vocab
    # registered as the target's draft, and suggested for it
    entry = lib.get(path)
    assert entry is not None and entry.origin == "derived"
    assert entry.draft_for == (str(smol_q8_0.resolve()),)
    assert [d.path for d in lib.drafts_for(smol_q8_0)] == [path]
    assert not list(lib.models_dir.glob(".*"))  # no partial file
    # a second derivation does not silently replace the first
    with pytest.raises(GambitError, match="already exists"):
        derive_draft(smol_q8_0, "Q4_0", library=lib)


def test_measure_acceptance(
    derived: tuple[Path, ModelLibrary, float, list[tuple[str, int, int]]], smol_q8_0: Path
) -> None:
    path = derived[0]
    prompts = ["The history of the printing press begins", "Photosynthesis is the process"]
    options = RuntimeOptions(n_ctx=256, n_threads=1)
    rate = measure_acceptance(smol_q8_0, path, prompts, n_tokens=24, options=options)
    # measured here: ~0.5 for Q4_0 under a Q8_0 SmolLM2-135M target
    assert 0.2 < rate <= 1.0
    # a model drafting for itself is always right
    assert measure_acceptance(smol_q8_0, smol_q8_0, prompts[:1], 16, options) == 1.0


def test_cancel_removes_the_partial_file(lib: ModelLibrary, smol_f16: Path) -> None:
    cancel = threading.Event()
    sizes: list[int] = []

    def progress(_stage: str, done: int, _total: int) -> None:
        sizes.append(done)
        if done > 0:
            cancel.set()  # as soon as the output file has grown

    dest = lib.models_dir / "cancelled.Q3_K_M.gguf"
    with pytest.raises(DeriveCancelledError, match="cancelled"):
        derive_draft(smol_f16, "Q3_K_M", dest=dest, progress=progress, cancel=cancel, library=lib)
    assert any(s > 0 for s in sizes), "never saw the output grow"
    assert not dest.exists()
    assert list(lib.models_dir.iterdir()) == []  # the partial file is gone
    assert lib.entries() == []
    # the quantizer child is gone too: nothing writes the partial file again
    time.sleep(0.3)
    assert list(lib.models_dir.iterdir()) == []


def test_disk_space_is_checked_first(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    check_disk_space(tmp_path, 1 << 20)
    with pytest.raises(GambitError, match="not enough disk space") as info:
        check_disk_space(tmp_path / "not" / "made", free * 2, "x.gguf")
    assert "x.gguf" in str(info.value) and "MB are free" in str(info.value)


def test_derive_into_a_small_file_system(tmp_path: Path, smol_q8_0: Path) -> None:
    """End to end on a real 8 MiB file system (a tmpfs; needs root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        t0 = time.perf_counter()
        with pytest.raises(GambitError, match="not enough disk space"):
            derive_draft(smol_q8_0, "Q4_0", dest=mount / "x.gguf", register=False)
        assert time.perf_counter() - t0 < 60  # a hang guard; refused before quantizing:
        assert list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_bad_requests(lib: ModelLibrary, smol_q8_0: Path, tmp_path: Path) -> None:
    with pytest.raises(GambitError, match="unknown quantization"):
        derive_draft(smol_q8_0, "Q9_9", library=lib)
    with pytest.raises(GambitError, match="overwrite its source"):
        derive_draft(smol_q8_0, "Q8_0", dest=smol_q8_0, library=lib)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GambitError, match="empty"):
        derive_draft(empty, "Q4_0", library=lib)
    assert lib.entries() == []


def test_derived_names() -> None:
    assert derived_name(Path("SmolLM2-135M-Instruct.Q8_0.gguf"), "Q4_0") == (
        "SmolLM2-135M-Instruct.Q4_0.gguf"
    )
    assert derived_name(Path("qwen2.5-7b-instruct-q4_k_m.gguf"), "Q2_K") == (
        "qwen2.5-7b-instruct-Q2_K.gguf"
    )
    assert derived_name(Path("model.gguf"), "Q4_0") == "model.Q4_0.gguf"
