"""Cancelling a model load (issue 35): the load stops at its next step, not
at its end; nothing stays loaded, and the next load works. The real worker
thread and the real engine on SmolLM2 (a target and a draft model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, Qt, Signal
from pytestqt.qtbot import QtBot

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import EngineConfig
from gambit.qt.worker import EngineInfo, WorkerThread
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.paths import cache_dir
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow

LOAD_TIMEOUT_MS = 120_000
OPTIONS = RuntimeOptions(n_ctx=512, n_threads=2)


class Requests(QObject):
    load = Signal(object, object)


@pytest.fixture
def worker(qtbot: QtBot) -> Iterator[tuple[WorkerThread, Requests]]:
    thread = WorkerThread()
    requests = Requests()
    requests.load.connect(thread.worker.load)
    yield thread, requests
    assert thread.stop(timeout_ms=30_000)


def test_a_cancelled_load_stops_at_its_next_step_and_the_next_load_works(
    qtbot: QtBot,
    worker: tuple[WorkerThread, Requests],
    q8_0_first8: Path,
    q4_1_first8: Path,
) -> None:
    thread, requests = worker
    config = EngineConfig(
        target=q8_0_first8,
        drafter="draft",
        draft=q4_1_first8,
        target_options=OPTIONS,
        kernel_cache=cache_dir(),  # the tests' shared probe verdicts (GAMBIT_CACHE)
    )
    heard: list[str] = []
    outcomes: list[Any] = []

    def on_progress(text: str) -> None:  # (on the worker's thread, as the load says it)
        heard.append(text)
        if text.startswith(f"Loading {q8_0_first8.name}"):
            thread.worker.cancel()  # the Cancel button, while the target loads

    direct = Qt.ConnectionType.DirectConnection
    thread.worker.load_progress.connect(on_progress, direct)
    thread.worker.loaded.connect(outcomes.append, direct)
    thread.worker.load_failed.connect(outcomes.append, direct)
    thread.worker.load_cancelled.connect(lambda: outcomes.append("cancelled"), direct)
    requests.load.emit(config, None)
    qtbot.waitUntil(lambda: bool(outcomes), timeout=LOAD_TIMEOUT_MS)
    assert outcomes == ["cancelled"]
    # It stopped at the step after the target: the draft was never loaded,
    # nothing was timed.
    assert any(t.startswith(f"Loading {q8_0_first8.name}") for t in heard), heard
    assert not any("draft" in t or "%" in t for t in heard), heard

    # The Cancel was for that load only: the next one loads, draft and all.
    outcomes.clear()
    thread.worker.load_progress.disconnect(on_progress)
    requests.load.emit(config, None)
    qtbot.waitUntil(lambda: bool(outcomes), timeout=LOAD_TIMEOUT_MS)
    [info] = outcomes
    assert isinstance(info, EngineInfo), info
    assert info.draft_name == q4_1_first8.name


def test_the_window_cancels_any_load_and_loads_again_on_request(
    qtbot: QtBot, tmp_path: Path, q8_0_first8: Path, q4_1_first8: Path
) -> None:
    """Cancel shows for every load, not only a layer-skip search; a cancelled
    load leaves "No model loaded" and a Load button that loads the models."""
    store = SettingsStore(tmp_path / "settings.json")
    store.save(
        Settings(
            target_model=str(q8_0_first8),
            drafter="draft",
            draft_model=str(q4_1_first8),
            context_size=512,
            threads=2,
        )
    )
    window = MainWindow(store, ConversationStore(tmp_path / "conversations.sqlite3"))
    qtbot.addWidget(window)
    window.show()

    def on_progress(text: str) -> None:  # (the worker's thread: as Cancel would, mid-load)
        if text.startswith(f"Loading {q8_0_first8.name}"):
            window.worker.cancel()

    window.worker.load_progress.connect(on_progress, Qt.ConnectionType.DirectConnection)
    window.load_engine()
    assert window.cancel_load_button.isVisible() and window.cancel_load_button.isEnabled()
    assert window.cancel_load_button.toolTip() == "Stop loading the model"
    assert not window.load_button.isVisible()
    qtbot.waitUntil(lambda: window.load_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    assert window.conversation.engine_info is None
    assert window.model_label.text() == "No model loaded"
    assert window.statusBar().currentMessage() == "Loading cancelled: no model is loaded"
    assert not window.cancel_load_button.isVisible() and not window.load_busy.isVisible()
    assert not window.send_button.isEnabled()  # nothing to send to

    window.worker.load_progress.disconnect(on_progress)
    qtbot.mouseClick(window.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    assert (
        window.conversation.engine_info is not None
        and window.conversation.engine_info.draft_name == q4_1_first8.name
    )
    assert not window.load_button.isVisible() and not window.cancel_load_button.isVisible()
    window.close()
