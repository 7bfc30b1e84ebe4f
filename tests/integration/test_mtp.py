"""MTP heads: detected from the GGUF header; never offered as a drafter (yet)."""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from gambit.formats import mtp
from gambit.formats.mtp import mtp_availability


def _header_with_heads(path: Path, n_heads: int) -> Path:
    """A small llama-architecture GGUF whose header declares ``n_heads`` MTP layers."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("glm-like-test")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(8)
    writer.add_uint32(gguf.Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch="llama"), n_heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(16)])
    writer.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def binding_without_mtp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A llama-cpp-python without the experimental llama-ext.h bindings."""
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_cpp_ext", None)  # import fails


def test_this_binding_wraps_the_mtp_staging_api() -> None:
    # llama-cpp-python 0.3.36 binds llama-ext.h's C++-mangled exports in an
    # experimental module; the MTP context type and batch API are in llama_cpp.
    from llama_cpp import llama_cpp_ext

    assert callable(llama_cpp_ext.llama_set_embeddings_nextn)
    assert callable(llama_cpp_ext.llama_get_embeddings_nextn_ith)
    assert callable(llama_cpp.llama_batch_ext_set_embd_state)
    assert llama_cpp.LLAMA_CONTEXT_TYPE_MTP == 1
    assert mtp.binding_has_mtp()
    assert mtp.binding_version() == "0.3.36"


def test_smollm2_has_no_heads(smol_q4_1: Path) -> None:
    result = mtp_availability(smol_q4_1)
    assert result.available is False
    assert result.n_heads == 0
    assert result.reason == (
        "SmolLM2-135M-Instruct.Q4_1.gguf has no multi-token-prediction heads "
        "(only models trained with them carry them, e.g. GLM-4.5, Qwen3.5, MiMo)."
    )


def test_heads_present_but_gambit_has_no_mtp_drafter(tmp_path: Path) -> None:
    result = mtp_availability(_header_with_heads(tmp_path / "glm-like.gguf", 1))
    assert result.available is False
    assert result.n_heads == 1
    assert result.reason == (
        "glm-like.gguf has 1 MTP head, and llama-cpp-python 0.3.36 binds llama.cpp's "
        "experimental MTP drafting API (llama-ext.h), but Gambit has no MTP drafter yet."
    )


@pytest.mark.usefixtures("binding_without_mtp")
def test_heads_present_but_the_binding_lacks_the_api(tmp_path: Path) -> None:
    assert not mtp.binding_has_mtp()
    result = mtp_availability(_header_with_heads(tmp_path / "glm-like.gguf", 2))
    assert (result.available, result.n_heads) == (False, 2)
    assert result.reason == (
        "glm-like.gguf has 2 MTP heads, but llama-cpp-python 0.3.36 does not expose "
        "llama.cpp's MTP drafting API (llama-ext.h); Gambit will offer it when the binding does."
    )


@pytest.mark.usefixtures("binding_without_mtp")
def test_no_heads_is_the_reason_whatever_the_binding(smol_q4_1: Path) -> None:
    result = mtp_availability(smol_q4_1)
    assert (result.available, result.n_heads) == (False, 0)
    assert "has no multi-token-prediction heads" in result.reason


def test_unreadable_file_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "noise.gguf"
    bad.write_bytes(b"not a model at all")
    result = mtp_availability(bad)
    assert (result.available, result.n_heads) == (False, 0)
    assert result.reason.startswith("noise.gguf could not be read: ")
    assert "GGUF" in result.reason
