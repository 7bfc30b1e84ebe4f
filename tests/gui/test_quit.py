"""Quitting the real app, as a process: it ends with status 0, says nothing
about QObjects or fatal errors, and what it had to write is in the history.

Each path once: the Models dialog cancelled, then File → Quit (the report's
steps); every dialog opened and cancelled, a reply, then File → Quit; and
File → Quit while a reply is still streaming. (Many runs of each in a row:
tests/quit_soak.py, outside the suite.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gambit.models.default_model import DEFAULT_MODEL_FILE
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.settings import Settings, SettingsStore

TIMEOUT_S = 240

# Runs the app through its entry point; a timer chain does what a user would.
DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QDialog, QMessageBox
import gambit.ui.app as entry

path = sys.argv[1]
real_exec = QApplication.exec
steps = []

def window():
    return next(w for w in QApplication.topLevelWidgets() if w.objectName() == "mainWindow")

def step(fn, delay=50):
    QTimer.singleShot(delay, fn)

def trigger(name):
    action = window().findChild(QAction, name)
    print("trigger", name, flush=True)
    action.trigger()

def when(found, then, waited=0):
    # (polls: a modal dialog runs its own event loop, the timers go on)
    shown = found()
    if shown is None:
        if waited > 600:
            raise SystemExit(f"gave up waiting ({then.__name__})")
        return step(lambda: when(found, then, waited + 1), 100)
    then(shown)

def modal():
    return QApplication.activeModalWidget()

def dialog(name):
    def find():
        for w in QApplication.topLevelWidgets():
            if w.objectName() == name and w.isVisible():
                return w
        return None
    return find

def cancel(shown):
    print("cancel", shown.objectName(), flush=True)
    shown.reject() if isinstance(shown, QDialog) else shown.close()

def run(queue):
    if queue:
        head, *rest = queue
        head(lambda: step(lambda: run(rest)))

def modal_dialog(action):
    def go(done):
        when(modal, lambda d: (cancel(d), step(done)))
        trigger(action)  # exec(): returns once cancelled
    return go

def shown_dialog(action, name):
    def go(done):
        trigger(action)
        when(dialog(name), lambda d: (cancel(d), step(done)))
    return go

def send(text):
    def go(done):
        w = window()
        w.input.setPlainText(text)
        w.send()
        print("sent; generating:", w.conversation.streaming, flush=True)
        done()
    return go

def reply_ended(done):
    when(lambda: None if window().conversation.streaming else True, lambda _: done())

def streaming(done):
    w = window()
    when(lambda: w.chat.streamed()[0] or None, lambda _: done())

def quit_now(_done):
    print("quitting; generating:", window().conversation.streaming, flush=True)
    trigger("quitAction")

def loaded(done):
    when(lambda: window().conversation.engine_info, lambda _: done())

PATHS = {
    "models": [loaded, modal_dialog("modelsAction"), quit_now],
    "dialogs": [
        loaded,
        modal_dialog("modelsAction"),
        modal_dialog("settingsAction"),
        shown_dialog("measureAction", "measureDialog"),
        shown_dialog("serverAction", "serverDialog"),
        shown_dialog("aboutAction", "aboutDialog"),
        send("Say hello."),
        reply_ended,
        quit_now,
    ],
    "streaming": [loaded, send("Tell me a long story about a lighthouse."), streaming, quit_now],
}

def exec_and_drive(*_args):
    step(lambda: run(PATHS[path]), 100)
    return real_exec()

QApplication.exec = exec_and_drive
sys.exit(entry.main([]))
"""


def _quit_run(tmp_path: Path, smol_q4_1: Path, path: str, max_tokens: int) -> tuple[str, str]:
    """Run the app along ``path`` with the embedded model; its stdout and stderr."""
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    (models / DEFAULT_MODEL_FILE).symlink_to(smol_q4_1)  # the embedded model, no download
    settings = Settings(max_tokens=max_tokens, temperature=0.0, threads=2, context_size=1024)
    SettingsStore(tmp_path / "config" / "settings.json").save(settings)
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, path],
        capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    bad = [
        line for line in proc.stderr.splitlines()
        if "QObject" in line or "Fatal Python error" in line or "Traceback" in line
    ]  # fmt: skip
    assert proc.returncode == 0 and not bad, proc.stdout + proc.stderr
    return proc.stdout, proc.stderr


def _history(tmp_path: Path) -> list[StoredMessage]:
    with ConversationStore(tmp_path / "data" / "conversations.sqlite3") as store:
        [conv] = [c for c in store.list() if store.messages(c.id)]
        return store.messages(conv.id)


def test_quit_after_cancelling_models(tmp_path: Path, smol_q4_1: Path) -> None:
    # The report's steps: before the fix this ended in SIGSEGV every time (the
    # dialog and its buttons had two owners, see gambit.ui.window.window_widgets.exec_once).
    stdout, _ = _quit_run(tmp_path, smol_q4_1, "models", max_tokens=8)
    assert "cancel modelsDialog" in stdout and "quitting" in stdout, stdout


def test_quit_after_every_dialog_and_a_reply(tmp_path: Path, smol_q4_1: Path) -> None:
    stdout, _ = _quit_run(tmp_path, smol_q4_1, "dialogs", max_tokens=8)
    for name in ("modelsDialog", "settingsDialog", "measureDialog", "serverDialog", "aboutDialog"):
        assert f"cancel {name}" in stdout, stdout
    assert "quitting; generating: False" in stdout
    user, reply = _history(tmp_path)
    assert (user.role, user.content) == ("user", "Say hello.")
    assert reply.role == "assistant" and reply.complete and reply.content


def test_quit_while_a_reply_streams(tmp_path: Path, smol_q4_1: Path) -> None:
    stdout, _ = _quit_run(tmp_path, smol_q4_1, "streaming", max_tokens=400)
    assert "quitting; generating: True" in stdout, stdout
    _, reply = _history(tmp_path)
    # What had streamed when the window closed is in the history, marked as such.
    assert reply.role == "assistant" and not reply.complete and reply.content
    assert reply.stats is not None and reply.stats["stop"] == "window closed"
