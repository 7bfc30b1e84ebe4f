"""A soak through the worker: hundreds of turns on the real engine must leave
memory and file descriptors where they were (issue #13: nothing leaks)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from PySide6.QtCore import QObject, Signal
from pytestqt.qtbot import QtBot

from gambit.engine.chat import Message
from gambit.engine.decoder import GenerationConfig
from gambit.engine.runtime import RuntimeOptions
from gambit.engine.sampling import SamplingParams
from gambit.engine.session import EngineConfig
from gambit.worker import EngineInfo, ReplyResult, WorkerThread

TURNS = 220
WARM_UP = 20  # allocators and caches settle first
SHORT = GenerationConfig(max_tokens=6, sampling=SamplingParams(temperature=0.7, seed=None))
PROMPTS = [
    "Name a colour.",
    "Repeat: the quick brown fox jumps over the lazy dog.",
    "Count from one to five.",
    "Say hello in French.",
]


class Requests(QObject):
    load = Signal(object, object)
    generate = Signal(object, object)


@pytest.fixture
def worker(qtbot: QtBot) -> Iterator[tuple[WorkerThread, Requests]]:
    thread = WorkerThread()
    requests = Requests()
    requests.load.connect(thread.worker.load)
    requests.generate.connect(thread.worker.generate)
    yield thread, requests
    assert thread.stop(timeout_ms=30_000)


def test_hundreds_of_turns_leak_neither_memory_nor_files(
    qtbot: QtBot, worker: tuple[WorkerThread, Requests], smol_q8_0: Path, smol_q4_1: Path
) -> None:
    thread, requests = worker
    outcomes: list[Any] = []
    thread.worker.loaded.connect(outcomes.append)
    thread.worker.load_failed.connect(outcomes.append)
    thread.worker.finished.connect(outcomes.append)
    thread.worker.failed.connect(lambda message, _partial: outcomes.append(message))
    config = EngineConfig(
        target=smol_q8_0, drafter="draft", draft=smol_q4_1,
        target_options=RuntimeOptions(n_ctx=512, n_threads=2),
    )  # fmt: skip
    requests.load.emit(config, None)
    qtbot.waitUntil(lambda: bool(outcomes), timeout=120_000)
    assert isinstance(outcomes.pop(), EngineInfo)

    proc = psutil.Process()
    rss = fds = 0
    for turn in range(TURNS):
        if turn == WARM_UP:
            rss, fds = proc.memory_info().rss, proc.num_fds()
        # Turns alternate between conversations, as a user switching chats does.
        history = [Message("user", PROMPTS[turn % len(PROMPTS)])]
        if turn % 3 == 0:
            history = [Message("user", "Hi"), Message("assistant", "Hello!"), *history]
        requests.generate.emit(history, SHORT)
        qtbot.waitUntil(lambda: bool(outcomes), timeout=60_000)
        result = outcomes.pop()
        assert isinstance(result, ReplyResult), result
        assert result.text or result.stop
    grown_mib = (proc.memory_info().rss - rss) / 2**20
    assert grown_mib < 32, f"resident memory grew {grown_mib:.1f} MiB over {TURNS - WARM_UP} turns"
    assert proc.num_fds() <= fds + 2
