"""Self-speculation by layer skipping, chosen in the real window on the real
engine: the search can be cancelled with the Cancel button next to the
progress, and a search whose best result cannot pay is said in plain words
and does not switch the drafter on. Either way the model runs without one."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.models.layerskip import ensure_layer_skip_draft
from gambit.models.library import ModelLibrary
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow

WAIT_MS = 600_000  # the search runs the model many times; a loaded machine is slow


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Data (the models folder, where layer-skip drafts are cached) and the
    temporary folder (where the search writes its copies) under tmp_path."""
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path / "home"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return tmp_path


@pytest.fixture
def settings(q4_1_first8: Path) -> Settings:
    return Settings(
        # The short Q4_1 (conftest: SmolLM2's first 8 blocks): the same
        # search, window and messages, its steps a fraction as long.
        target_model=str(q4_1_first8),
        drafter="layerskip",
        temperature=0.0,
        max_tokens=8,
        context_size=1024,
        threads=2,
    )


def _open(qtbot: QtBot, home: Path, settings: Settings, progress: list[str]) -> MainWindow:
    store = SettingsStore(home / "settings.json")
    store.save(settings)
    window = MainWindow(store, ConversationStore(home / "conversations.sqlite3"))
    qtbot.addWidget(window)
    window.worker.load_progress.connect(progress.append)  # called on the worker thread
    window.show()
    window.load_engine()
    return window


@pytest.fixture
def progress() -> Iterator[list[str]]:
    yield []


def _warning(window: MainWindow) -> QMessageBox:
    box = window.findChild(QMessageBox, "warningDialog")
    assert box is not None
    return box


def _plain_reply(qtbot: QtBot, window: MainWindow) -> None:
    window.input.setPlainText("Hi")
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert window.conversation.streaming
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=WAIT_MS)
    assert window.chat.messages[-1].role == "assistant" and window.chat.messages[-1].text


def test_cancel_stops_the_search_and_the_model_runs_without_a_drafter(
    qtbot: QtBot, home: Path, settings: Settings, progress: list[str]
) -> None:
    window = _open(qtbot, home, settings, progress)
    button = window.cancel_load_button
    assert button.isVisible() and button.isEnabled()
    scratch = home / "tmp"
    # Mid-search: candidates are being measured, a copy of the target on disk.
    qtbot.waitUntil(
        lambda: (
            any("Finding layers to skip: measuring block" in p for p in progress)
            and any(f.is_file() for f in scratch.glob("gambit-layerskip-*/*"))
        ),
        timeout=WAIT_MS,
    )
    assert window.conversation.engine_info is None and not window.send_button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert not button.isEnabled()  # pressed once; the search stops at its next step

    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=WAIT_MS)
    info = window.conversation.engine_info
    assert info is not None
    assert (info.drafter, info.drafter_label) == ("none", None)
    assert not button.isVisible()
    box = _warning(window)
    assert box.windowTitle() == "Self-speculation is off"
    assert "search for layers to skip was cancelled" in box.text()
    assert "plain decoding" in box.text()
    assert window.spec_label.text() == "Speculation: no drafter"
    # not switched on: the settings say so too, and nothing of the search is left
    assert SettingsStore(home / "settings.json").load().drafter == "none"
    assert list(scratch.iterdir()) == []
    models = home / "home" / "data" / "models"
    assert not models.exists() or not [p for p in models.iterdir() if "layerskip" in p.name]
    box.close()
    _plain_reply(qtbot, window)
    window.close()


def test_a_result_that_cannot_pay_is_said_and_not_switched_on(
    qtbot: QtBot, home: Path, settings: Settings, progress: list[str], smol_q4_1: Path
) -> None:
    # A real search, cached in the models folder as the window's own would be.
    # Its calibration texts are empty (n_tokens=0), so the draft agrees with
    # the target on nothing measured: whatever the machine's timings, drafting
    # with it cannot pay.
    result = ensure_layer_skip_draft(
        smol_q4_1,
        library=ModelLibrary(),
        options=RuntimeOptions(n_ctx=1024, n_threads=2),
        max_evaluations=1,
        prompts=["Hi"],
        n_tokens=0,
    )
    reason = result.plan.refusal()
    assert reason is not None and not result.plan.pays

    # (the full model: a search's cache is found by its source's name, and a
    # short copy's drafts name the model it was cut from)
    window = _open(qtbot, home, settings.with_(target_model=str(smol_q4_1)), progress)
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=WAIT_MS)
    info = window.conversation.engine_info
    assert info is not None
    assert not any("measuring" in p for p in progress)  # the cached result, no new search
    assert (info.drafter, info.drafter_label) == ("none", None)
    assert info.drafter_refused == reason
    box = _warning(window)
    assert box.windowTitle() == "Self-speculation is off"
    assert box.text().startswith(f"Skipping layers cannot speed up {smol_q4_1.name}")
    assert "Replies use plain decoding" in box.text()
    assert not window.cancel_load_button.isVisible()
    assert window.spec_label.text() == "Speculation: no drafter"
    assert SettingsStore(home / "settings.json").load().drafter == "none"
    box.close()
    _plain_reply(qtbot, window)
    window.close()
