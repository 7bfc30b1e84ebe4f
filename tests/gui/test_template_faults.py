"""The real window and a model whose chat template fails or runs long.

A template that raises ends the reply with a message naming the model; the
window is idle again and the user's message stays in the conversation.
Closing the window while the engine is busy inside a slow template (or a
long prompt) ends the process cleanly: exit status 0, never Qt's abort
("QThread: Destroyed while thread is still running")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow
from gguf_fixtures import copy_gguf, reader_of

WAIT_MS = 240_000
RAISES = "{{ raise_exception('System role not supported') }}"
# Within the sandbox's loop limit but slow: only its 10 s deadline or Stop ends it.
SLOW = "{% for a in range(100000) %}{{ range(100000)|sort|sum }}{% endfor %}"


def _with_template(src: Path, dst: Path, template: str) -> Path:
    def edit(name: str, value: object) -> object:
        return template if name == "tokenizer.chat_template" else value

    return copy_gguf(reader_of(src), dst, edit)


def _settings(target: Path, **changes: object) -> Settings:
    base = Settings(target_model=str(target), drafter="none", temperature=0.0, max_tokens=16)
    return base.with_(**{"threads": 2, "context_size": 1024, **changes})


def test_a_failing_chat_template_is_said_and_the_window_stays_usable(
    qtbot: QtBot, tmp_path: Path, smol_q4_1: Path
) -> None:
    model = _with_template(smol_q4_1, tmp_path / "strict-template.gguf", RAISES)
    store = SettingsStore(tmp_path / "settings.json")
    store.save(_settings(model))
    db = tmp_path / "conversations.sqlite3"
    window = MainWindow(store, ConversationStore(db))
    qtbot.addWidget(window)
    window.show()
    window.load_engine()
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=WAIT_MS)

    for attempt in ("Hello there", "Are you there?"):
        window.input.setPlainText(attempt)
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=WAIT_MS)
        box = window.findChild(QMessageBox, "errorDialog")
        assert box is not None
        assert box.windowTitle() == "The reply could not be completed"
        assert box.text() == (
            f"the chat template of {model.name} failed: System role not supported"
        )
        box.close()
        box.deleteLater()
        qtbot.waitUntil(lambda: window.findChild(QMessageBox, "errorDialog") is None)
        # idle again, ready for the next message
        assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
        assert window.input.toPlainText() == ""
        users = [m.text for m in window.chat.messages if m.role == "user"]
        assert users[-1] == attempt
        assert "Traceback" not in window.chat.messages[-1].text

    conv = window.conversation.id
    assert conv is not None
    window.close()
    with ConversationStore(db) as saved:
        messages = saved.messages(conv)
    assert [m.content for m in messages if m.role == "user"] == ["Hello there", "Are you there?"]
    replies = [m for m in messages if m.role == "assistant"]
    assert all(not m.complete and m.stats and "System role" in m.stats["error"] for m in replies)


CLOSE_DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import gambit.ui.app as entry
from gambit.ui.window.main_window import MainWindow

real_exec = QApplication.exec
prompt = sys.argv[1]

def window():
    return next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))

def send_when_loaded():
    w = window()
    if w.conversation.engine_info is None:
        QTimer.singleShot(100, send_when_loaded)
        return
    w.input.setPlainText(prompt)
    w.send()
    # The engine is now inside the template (or the prompt) for many seconds.
    QTimer.singleShot(1500, close)

def close():
    print("closing; generating:", window().conversation.streaming, flush=True)
    QApplication.closeAllWindows()

def exec_then_close(*_args):
    QTimer.singleShot(100, send_when_loaded)
    return real_exec()

QApplication.exec = exec_then_close
sys.exit(entry.main([]))
"""


@pytest.mark.parametrize("stuck", ["template", "prefill"])
def test_closing_while_the_engine_is_busy_exits_cleanly(
    tmp_path: Path, smol_q4_1: Path, stuck: str
) -> None:
    if stuck == "template":
        target = _with_template(smol_q4_1, tmp_path / "slow-template.gguf", SLOW)
        settings, prompt = _settings(target), "Hi"
    else:  # a prompt of 6,000 tokens: seconds of prompt processing
        prompt = "The quick brown fox jumps over the lazy dog. " * 600
        settings = _settings(smol_q4_1, context_size=8192)
    SettingsStore(tmp_path / "config" / "settings.json").save(settings)
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run(
        [sys.executable, "-c", CLOSE_DRIVER, prompt],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT_MS / 1000,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "closing; generating: True" in proc.stdout  # closed mid-reply
    assert "QThread: Destroyed" not in output and "Traceback" not in output
    with ConversationStore(tmp_path / "data" / "conversations.sqlite3") as store:
        [conv] = store.list()
        messages = store.messages(conv.id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == prompt.strip()
    reply = messages[1]
    assert not reply.complete and reply.stats and reply.stats["stop"] == "window closed"
    if stuck == "template":
        assert reply.content == ""  # the template never finished: nothing was generated
