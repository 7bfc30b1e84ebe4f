"""The main window on the real engine and the small real model, offscreen."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000
FREEZE_MS = 20_000  # the UI event loop never stops this long unless it hangs


@pytest.fixture
def settings(smol_q4_1: Path) -> Settings:
    return Settings(
        target_model=str(smol_q4_1),
        drafter="lookup",
        temperature=0.0,
        max_tokens=32,
        context_size=1024,
        threads=2,
    )


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "settings.json", tmp_path / "conversations.sqlite3"


def open_window(qtbot: QtBot, paths: tuple[Path, Path], settings: Settings | None) -> MainWindow:
    settings_path, db_path = paths
    store = SettingsStore(settings_path)
    if settings is not None:
        store.save(settings)
    window = MainWindow(store, ConversationStore(db_path))
    qtbot.addWidget(window)
    window.show()
    window.load_engine()
    return window


@pytest.fixture
def window(qtbot: QtBot, paths: tuple[Path, Path], settings: Settings) -> Iterator[MainWindow]:
    w = open_window(qtbot, paths, settings)
    w.latency.reset()
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    print(f"UI event loop: longest block while the models loaded {w.latency.max_late_ms:.1f} ms")
    # A freeze guard only a hang can hit (loading runs on the worker thread); the
    # figure itself is printed, not judged.
    assert w.latency.max_late_ms < FREEZE_MS
    yield w
    w.close()


def send(qtbot: QtBot, window: MainWindow, text: str) -> None:
    window.input.setPlainText(text)
    qtbot.mouseClick(window.send_button, qtbot_left())
    assert window.conversation.streaming


def qtbot_left():  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def wait_reply(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)


def test_send_streams_a_reply_and_saves_it(qtbot: QtBot, window: MainWindow) -> None:
    deltas: list[object] = []
    window.worker.delta.connect(deltas.append)
    window.latency.reset()
    send(qtbot, window, "Repeat exactly: red, green, blue, red, green, blue.")
    wait_reply(qtbot, window)
    reply = window.chat.messages[-1]
    assert reply.role == "assistant" and reply.text.strip()
    # Streamed round by round, not delivered at once (prompt lookup copies
    # this reply in a few long rounds, so a few deltas are all there is).
    assert len(deltas) >= 2
    assert "".join(d.text for d in deltas).strip() == reply.text.strip()  # type: ignore[attr-defined]
    assert "tok/s" in reply.footer
    stored = window.store.messages(window.conversation.id or -1)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[-1].content == reply.text and stored[-1].complete
    assert stored[-1].stats and stored[-1].stats["tokens"] > 0
    # the conversation got a title from the first message
    assert window.store.get(window.conversation.id or -1).title.startswith("Repeat exactly")
    print(f"UI event loop: longest block during the reply {window.latency.max_late_ms:.1f} ms")
    # A freeze guard, not a speed goal: the engine runs on its own thread.
    assert window.latency.max_late_ms < FREEZE_MS


def test_stats_panel_updates(qtbot: QtBot, window: MainWindow) -> None:
    before = window.stats.repaint_count
    send(qtbot, window, "Count from one to ten, one number per line.")
    wait_reply(qtbot, window)
    qtbot.waitUntil(lambda: window.stats.repaint_count > before, timeout=5000)
    speedup = window.stats.findChild(type(window.model_label), "speedupValue")
    assert speedup is not None and "×" in speedup.text()


def test_tree_drafts_reload_the_engine_and_show_in_the_panel(
    qtbot: QtBot, window: MainWindow
) -> None:
    drafter = window.stats.findChild(type(window.model_label), "drafterValue")
    assert drafter is not None
    assert drafter.text() == "Drafter: prompt lookup · chain"
    window.apply_settings(window.settings.with_(tree_drafts=True, tree_nodes=4))
    # While it reloads the panel shows no stale drafter, and the status bar is busy.
    assert window.model_label.text() == "Loading…"
    assert drafter.isHidden() and not window.load_busy.isHidden()
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    assert window.load_busy.isHidden()
    assert window.conversation.engine_info is not None
    assert window.conversation.engine_info.drafter_detail == "tree, up to 4 nodes"
    assert drafter.text() == "Drafter: prompt lookup · tree, up to 4 nodes"
    assert window.settings_store.load().tree_drafts  # saved
    send(qtbot, window, "Repeat exactly: red, green, blue, red, green, blue.")
    wait_reply(qtbot, window)
    assert window.chat.messages[-1].text.strip()


def test_speculation_toggle_takes_effect_mid_conversation(qtbot: QtBot, window: MainWindow) -> None:
    prompt = "Repeat exactly: one two three four, one two three four, one two three four."
    send(qtbot, window, prompt)
    wait_reply(qtbot, window)
    first = window.store.messages(window.conversation.id or -1)[-1].stats or {}
    window.speculation_action.trigger()  # off
    assert not window.settings.speculation
    assert window.worker._engine is not None
    assert not window.worker._engine.speculating
    send(qtbot, window, prompt)
    wait_reply(qtbot, window)
    second = window.store.messages(window.conversation.id or -1)[-1].stats or {}
    assert second["drafted_tokens"] == 0
    assert first["speculation"] and not second["speculation"]
    window.speculation_action.trigger()  # back on, same conversation
    assert window.worker._engine.speculating


def test_stop_keeps_the_partial_reply(qtbot: QtBot, paths: tuple[Path, Path], settings: Settings
                                      ) -> None:  # fmt: skip
    w = open_window(qtbot, paths, settings.with_(max_tokens=2000, drafter="none"))
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    deltas: list[object] = []
    w.worker.delta.connect(deltas.append)
    send(qtbot, w, "Write a very long story about a lighthouse keeper.")
    qtbot.waitUntil(lambda: len(deltas) >= 5, timeout=REPLY_TIMEOUT_MS)
    qtbot.mouseClick(w.stop_button, qtbot_left())
    wait_reply(qtbot, w)
    reply = w.chat.messages[-1]
    stored = w.store.messages(w.conversation.id or -1)[-1]
    assert reply.text and stored.content == reply.text
    assert not stored.complete
    assert "stopped" in reply.footer
    assert w.send_button.isEnabled()  # usable again
    w.close()


def test_a_setting_that_reloads_changed_during_a_reply_applies_when_it_ends(
    qtbot: QtBot, paths: tuple[Path, Path], settings: Settings, q4_1_first8: Path
) -> None:
    # The short Q4_1 (conftest): a long reply in a fraction of the time.
    short = settings.with_(target_model=str(q4_1_first8), max_tokens=900, drafter="none")
    w = open_window(qtbot, paths, short)
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    assert w.conversation.engine_info is not None and w.conversation.engine_info.n_ctx == 1024
    deltas: list[object] = []
    w.worker.delta.connect(deltas.append)
    send(qtbot, w, "Write a very long story about a lighthouse keeper.")
    qtbot.waitUntil(lambda: len(deltas) >= 2, timeout=REPLY_TIMEOUT_MS)
    assert w.apply_settings(w.settings.with_(context_size=2048))
    # The reply goes on with the models it started with ...
    assert (
        w.conversation.streaming
        and w.conversation.engine_info is not None
        and w.conversation.engine_info.n_ctx == 1024
    )
    assert w.settings_store.load().context_size == 2048  # (saved at once)
    # (Stop ends it as its last token would: the same end of a reply.)
    qtbot.mouseClick(w.stop_button, qtbot_left())
    wait_reply(qtbot, w)
    # ... and the new context size is loaded as soon as it ends.
    qtbot.waitUntil(
        lambda: w.conversation.engine_info is not None and w.conversation.engine_info.n_ctx == 2048,
        timeout=LOAD_TIMEOUT_MS,
    )
    w.close()


def test_settings_and_conversations_survive_a_restart(
    qtbot: QtBot, paths: tuple[Path, Path], settings: Settings
) -> None:
    w = open_window(qtbot, paths, settings)
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    assert w.chat.pacing  # even streaming is on by default
    w.apply_settings(
        w.settings.with_(temperature=0.0, top_k=12, system_prompt="Be brief.", even_streaming=False)
    )
    assert not w.chat.pacing
    send(qtbot, w, "Say hello.")
    wait_reply(qtbot, w)
    conv_id = w.conversation.id
    reply_text = w.chat.messages[-1].text
    w.close()

    again = open_window(qtbot, paths, None)
    assert again.settings.top_k == 12 and again.settings.system_prompt == "Be brief."
    assert not again.chat.pacing
    assert again.conversation.id == conv_id
    assert [m.role for m in again.chat.messages] == ["user", "assistant"]
    assert again.chat.messages[-1].text == reply_text
    again.close()


def test_bad_model_path_shows_an_error_and_the_app_stays_usable(
    qtbot: QtBot, paths: tuple[Path, Path], settings: Settings, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model.gguf"
    w = open_window(qtbot, paths, settings.with_(target_model=str(missing)))
    qtbot.waitUntil(lambda: w.findChild(QMessageBox, "errorDialog") is not None, timeout=30_000)
    box = w.findChild(QMessageBox, "errorDialog")
    assert box is not None and "not found" in box.text() + box.informativeText()
    assert w.conversation.engine_info is None and not w.send_button.isEnabled()
    box.close()
    w.apply_settings(w.settings.with_(target_model=settings.target_model))
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    send(qtbot, w, "Hi")
    wait_reply(qtbot, w)
    assert w.chat.messages[-1].text
    w.close()


def test_closing_during_a_reply_exits_cleanly_and_saves_it(
    qtbot: QtBot, paths: tuple[Path, Path], settings: Settings
) -> None:
    w = open_window(qtbot, paths, settings.with_(max_tokens=2000, drafter="none"))
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    deltas: list[object] = []
    w.worker.delta.connect(deltas.append)
    send(qtbot, w, "Write a very long story about a dragon.")
    qtbot.waitUntil(lambda: len(deltas) >= 5, timeout=REPLY_TIMEOUT_MS)
    conv_id = w.conversation.id
    thread = w.worker_thread.thread
    w.close()
    assert thread.isFinished()
    with ConversationStore(paths[1]) as store:
        saved = store.messages(conv_id or -1)[-1]
    assert saved.role == "assistant" and saved.content and not saved.complete


def test_screenshot_mid_reply(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    window.resize(1360, 860)
    deltas: list[object] = []
    window.worker.delta.connect(deltas.append)
    # a fixed γ and a copy-heavy prompt, so the picture shows accepted drafts
    window.apply_settings(window.settings.with_(max_tokens=160, policy="fixed"))
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    send(
        qtbot,
        window,
        "Rewrite this list in **bold**, keeping every line:\n"
        "- red apples\n- green pears\n- yellow bananas\n- purple plums\n- orange oranges",
    )
    qtbot.waitUntil(lambda: len(deltas) >= 10, timeout=REPLY_TIMEOUT_MS)
    qtbot.wait(300)  # one repaint tick of the chat and the panel
    shot = tmp_path / "main_window.png"
    assert window.grab().save(str(shot))
    assert shot.stat().st_size > 10_000
    wait_reply(qtbot, window)
    out = os.environ.get("GAMBIT_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / "main_window.png")
        from gambit.ui.settings.settings_dialog import SettingsDialog

        dialog = SettingsDialog(window.settings, window)
        dialog.tabs.setCurrentIndex(1)  # Speculation
        dialog.show()
        qtbot.wait(100)
        dialog.grab().save(str(Path(out) / "settings_dialog.png"))
        dialog.close()


def test_finished_reply_has_no_streaming_caret(qtbot: QtBot, window: MainWindow) -> None:
    send(qtbot, window, "Say hi.")
    wait_reply(qtbot, window)
    assert "▍" not in window.chat.toPlainText()
    assert window.chat.messages[-1].text in window.chat.toPlainText()


def test_a_stored_thread_count_that_would_crash_is_reset_and_said(
    qtbot: QtBot, paths: tuple[Path, Path], settings: Settings
) -> None:
    # "threads": -3 in settings.json used to crash llama.cpp on every start.
    settings_path, _ = paths
    SettingsStore(settings_path).save(settings)
    data = json.loads(settings_path.read_text())
    settings_path.write_text(json.dumps({**data, "threads": -3}))
    w = open_window(qtbot, paths, None)
    qtbot.waitUntil(lambda: w.findChild(QMessageBox, "errorDialog") is not None, timeout=30_000)
    box = w.findChild(QMessageBox, "errorDialog")
    assert box is not None
    assert "Threads must be 0 (automatic) or a whole number from 1 to 512, not -3" in (
        box.text() + box.informativeText()
    )
    assert w.settings == settings.with_(threads=0)
    box.close()
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    w.close()


def test_settings_naming_no_model_are_refused_and_the_model_stays_loaded(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QDialogButtonBox, QLabel, QLineEdit

    from gambit.ui.settings.settings_dialog import SettingsDialog

    readme = tmp_path / "README.md"
    readme.write_text("# Gambit\n\nA desktop chat app.\n")
    text_gguf = tmp_path / "x.gguf"
    text_gguf.write_text("not a model\n")
    loaded = window.conversation.engine_info
    saved = window.settings_store.path.read_bytes()
    seen: list[str] = []

    def in_dialog() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, SettingsDialog):
            QTimer.singleShot(20, in_dialog)
            return
        edit = dialog.findChild(QLineEdit, "targetModelEdit")
        reason = dialog.findChild(QLabel, "targetModelError")
        assert isinstance(edit, QLineEdit) and isinstance(reason, QLabel)
        for bad in (readme, text_gguf):
            edit.setText(str(bad))
            dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
            assert dialog.isVisible() and reason.isVisible()  # refused, still open
            seen.append(reason.text())
        assert (
            window.conversation.engine_info is loaded
        )  # nothing unloaded while the dialog is open
        dialog.reject()

    QTimer.singleShot(0, in_dialog)
    window.settings_action.trigger()  # the dialog runs its own event loop until rejected
    assert seen[0].startswith("Target model: not a GGUF model file (llama.cpp needs .gguf")
    assert seen[1].startswith("Target model: not a GGUF model file: it is named .gguf, but")
    assert "needs .gguf" not in seen[1]

    # The same refusal where settings come from elsewhere (the Models dialog).
    assert not window.apply_settings(window.settings.with_(target_model=str(text_gguf)))
    box = window.findChild(QMessageBox, "errorDialog")
    assert box is not None and "it is named .gguf, but it holds text" in box.text()
    box.close()

    qtbot.wait(200)  # a reload, had one started, would have reset engine_info by now
    assert window.conversation.engine_info is loaded
    assert window.model_label.text() != "Loading…"
    assert window.settings_store.path.read_bytes() == saved  # nothing saved
    assert window.settings.target_model != str(text_gguf)
    assert window.send_button.isEnabled()  # the loaded model is still there to answer
