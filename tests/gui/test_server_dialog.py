"""Tools → Local server in a real window: the window's loaded models answer an
OpenAI client, on the window's engine thread, and the panel shows the reply."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.server_dialog import ServerDialog
from gambit.ui.window.main_window import MainWindow

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, smol_q4_1: Path) -> Iterator[MainWindow]:
    store = SettingsStore(tmp_path / "settings.json")
    store.save(
        Settings(target_model=str(smol_q4_1), drafter="lookup", temperature=0.0,
                 max_tokens=24, context_size=1024, threads=2)
    )  # fmt: skip
    w = MainWindow(store, ConversationStore(tmp_path / "c.sqlite3"))
    qtbot.addWidget(w)
    w.show()
    w.load_engine()
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    yield w
    w.close()


def test_the_window_serves_its_models_and_shows_the_replies(
    qtbot: QtBot, window: MainWindow
) -> None:
    window.menus.server.trigger()
    dialog = window.findChild(ServerDialog, "serverDialog")
    assert isinstance(dialog, ServerDialog)
    assert dialog.address.text() == "127.0.0.1"  # this machine only, by default
    dialog.port.setValue(free_port())
    dialog.api_key.setText("k3y")
    qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
    service = window.menus.local_service
    assert service is not None and service.running
    assert dialog.status.text().startswith("Serving SmolLM2-135M-Instruct.Q4_1.gguf at http://")
    assert window.settings_store.load().server_api_key == "k3y"  # remembered
    qtbot.mouseClick(dialog.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == service.base_url

    snapshots: list[object] = []
    window.worker.served.connect(snapshots.append)
    answers: list[str | None] = []

    def ask() -> None:  # a client of the server, off the window's thread as an editor is
        client = openai.OpenAI(base_url=service.base_url, api_key="k3y", max_retries=0)
        reply = client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1",
            messages=[{"role": "user", "content": "Name three colours."}],
            temperature=0,
            max_tokens=16,
        )
        answers.append(reply.choices[0].message.content)

    asking = threading.Thread(target=ask)
    asking.start()
    qtbot.waitUntil(lambda: bool(answers), timeout=REPLY_TIMEOUT_MS)  # the window stays live
    asking.join()
    assert answers[0]
    qtbot.waitUntil(lambda: bool(snapshots), timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.stats.snapshot is not None, timeout=5000)
    shown = window.stats.snapshot
    assert shown is not None and shown.n_tokens > 0  # the panel shows the served reply
    qtbot.waitUntil(lambda: "1 request so far" in dialog.status.text(), timeout=5000)

    url = service.base_url
    qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)  # Stop
    assert not service.running and dialog.status.text() == "Not serving."
    with pytest.raises(openai.APIConnectionError):  # the port is closed again
        openai.OpenAI(base_url=url, api_key="k3y", max_retries=0).models.list()


def test_a_port_in_use_is_said_and_nothing_runs(qtbot: QtBot, window: MainWindow) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        window.menus.server.trigger()
        dialog = window.findChild(ServerDialog, "serverDialog")
        assert isinstance(dialog, ServerDialog)
        dialog.port.setValue(taken.getsockname()[1])
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        assert window.menus.local_service is not None and not window.menus.local_service.running
        assert "could not start" in dialog.status.text() and "in use" in dialog.status.text()
