"""Fixtures of the server's tests (``serving``): the served pair's engine,
loaded once per module, and a server on it per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import OPTIONS, Served

from gambit.engine.session import Engine, EngineConfig
from gambit.storage.paths import cache_dir


@pytest.fixture(scope="module")
def engine(smol_q8_0: Path, smol_q4_1: Path) -> Iterator[Engine]:
    e = Engine(
        EngineConfig(
            target=smol_q8_0, drafter="draft", draft=smol_q4_1, target_options=OPTIONS,
            policy="fixed", gamma=4, kernel_cache=cache_dir(),
        )
    )  # fmt: skip
    yield e
    e.close()


@pytest.fixture
def served(engine: Engine) -> Iterator[Served]:
    s = Served(engine)
    yield s
    s.close()
