"""A worker that holds the target's layers dies mid-reply: the window keeps the
reply so far, names the worker, stays usable, and goes on on this machine when
asked. Real widgets offscreen, a real ``gambit-worker`` killed with SIGKILL, the
real engine and the small real model."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QPushButton
from pytestqt.qtbot import QtBot

from gambit.engine.machine.target_host import HostedRuntime
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow
from gambit.ui.window.worker_lost import CONTINUE_LOCALLY
from worker_process import workers

TIMEOUT_MS = 180_000


def _send(qtbot: QtBot, window: MainWindow, text: str) -> None:
    window.input.setPlainText(text)
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)


def _lost_box(qtbot: QtBot, window: MainWindow) -> QMessageBox:
    qtbot.waitUntil(
        lambda: window.findChild(QMessageBox, "workerLostDialog") is not None, timeout=TIMEOUT_MS
    )
    box = window.findChild(QMessageBox, "workerLostDialog")
    assert isinstance(box, QMessageBox)
    return box


def test_a_worker_killed_mid_reply_keeps_the_reply_and_the_window(
    qtbot: QtBot, tmp_path: Path, smol_q4_1: Path
) -> None:
    settings_path = tmp_path / "settings.json"
    with workers(tmp_path, 1) as (worker,):
        SettingsStore(settings_path).save(
            Settings(
                target_model=str(smol_q4_1),
                drafter="none",
                temperature=0.0,
                max_tokens=2000,  # far longer than the test lets it run
                context_size=4096,
                threads=1,
                rpc_workers=(worker.endpoint,),
            )
        )
        window = MainWindow(SettingsStore(settings_path), ConversationStore(tmp_path / "c.db"))
        qtbot.addWidget(window)
        window.show()
        window.load_engine()
        qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=TIMEOUT_MS)
        engine = window.worker._engine
        assert engine is not None and isinstance(engine.target, HostedRuntime)

        _send(qtbot, window, "Write a very long story about a lighthouse keeper.")
        qtbot.waitUntil(
            lambda: window.chat.streaming is not None and bool(window.chat.streaming.text),
            timeout=TIMEOUT_MS,
        )
        worker.kill()  # SIGKILL, after the first streamed text
        box = _lost_box(qtbot, window)

        assert worker.endpoint in box.text() and "reply so far is kept" in box.text()
        assert not window.conversation.streaming
        assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
        assert window.worker._engine is None  # the broken engine is gone
        assert window.conversation.engine_info is None
        conv = window.conversation.id
        assert conv is not None
        reply = window.store.messages(conv)[-1]
        assert reply.role == "assistant" and reply.content.strip() and not reply.complete
        assert reply.stats is not None and worker.endpoint in str(reply.stats.get("error"))

        # Send while the engine is gone: the same offer again, nothing stored
        box.close()
        qtbot.waitUntil(lambda: window.findChild(QMessageBox, "workerLostDialog") is None)
        _send(qtbot, window, "Are you there?")
        box = _lost_box(qtbot, window)
        assert window.input.toPlainText() == "Are you there?"  # kept for later
        assert len(window.store.messages(conv)) == 2

        local = box.findChild(QPushButton, "continueLocallyButton")
        assert isinstance(local, QPushButton) and local.text() == CONTINUE_LOCALLY
        qtbot.mouseClick(local, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=TIMEOUT_MS)

    # the workers setting is cleared and saved; the model runs here
    assert window.settings.rpc_workers == ()
    assert SettingsStore(settings_path).load().rpc_workers == ()
    engine = window.worker._engine
    assert engine is not None and not isinstance(engine.target, HostedRuntime)
    window.apply_settings(window.settings.with_(max_tokens=8))
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert window.conversation.streaming
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=TIMEOUT_MS)
    stored = window.store.messages(conv)
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].content == reply.content  # the partial reply is still there
    assert stored[-1].complete and stored[-1].content.strip()
    window.close()
