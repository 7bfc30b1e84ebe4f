"""Presets in the window, on a real model: one made in Tools → Presets…, a
chat started from it, its system prompt in the prompt the engine decoded and
in the export, and back from an import; a conversation's own system prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QInputDialog, QMenu
from pytestqt.qtbot import QtBot
from test_main_window import LOAD_TIMEOUT_MS, open_window, send, wait_reply

from gambit.storage.chat_files.chat_export import read_conversations, to_json
from gambit.storage.chat_files.chat_import import import_chat_file
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.presets import DEFAULT_PRESET, PresetStore
from gambit.storage.settings import Settings
from gambit.ui.settings.presets_dialog import PresetsDialog
from gambit.ui.window.main_window import MainWindow

PIRATE = "You are a pirate. Answer every question like one."


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, smol_q4_1: Path) -> Iterator[MainWindow]:
    settings = Settings(
        target_model=str(smol_q4_1), drafter="lookup", temperature=0.0, max_tokens=32,
        context_size=1024, threads=2,
    )  # fmt: skip
    w = open_window(qtbot, (tmp_path / "settings.json", tmp_path / "chats.sqlite3"), settings)
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    yield w
    w.close()


def decoded(window: MainWindow) -> str:
    """The text of the context the engine decoded the last reply in: its prompt first."""
    engine = window.worker._engine
    assert engine is not None
    return engine.target.detokenize(engine.decoder.context)


def make_pirate(qtbot: QtBot, window: MainWindow, **values: object) -> None:
    """Tools → Presets…, New, named and filled in, OK."""
    action = window.findChild(QAction, "presetsAction")
    assert isinstance(action, QAction)
    action.trigger()
    dialog = window.findChild(PresetsDialog, "presetsDialog")
    assert isinstance(dialog, PresetsDialog) and dialog.isVisible()
    dialog.new_button.click()
    dialog.name_edit.setText("Pirate")
    dialog.prompt_edit.setPlainText(PIRATE)
    for name, value in values.items():
        widget = dialog.fields[name]
        widget.setChecked(value) if name == "speculation" else widget.setValue(value)  # type: ignore[attr-defined]
    dialog.accept()
    qtbot.waitUntil(lambda: not dialog.isVisible())


def new_chat_from(window: MainWindow, name: str) -> None:
    menu = window.findChild(QMenu, "newFromPresetMenu")
    assert isinstance(menu, QMenu)
    menu.aboutToShow.emit()  # (as opening it does: filled from the presets now)
    [action] = [a for a in menu.actions() if a.objectName() == f"newFromPreset:{name}"]
    action.trigger()


def test_a_chat_from_a_preset_keeps_its_system_prompt_and_sampling(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    make_pirate(qtbot, window, max_tokens=8, temperature=0.0)
    saved = PresetStore(tmp_path / "presets.json").load()  # beside settings.json
    assert [(p.name, p.system_prompt, p.values["max_tokens"]) for p in saved] == [
        ("Pirate", PIRATE, 8)
    ]

    new_chat_from(window, "Pirate")
    conv_id = window.conversation.id or -1
    conversation = window.store.get(conv_id)
    assert conversation.preset == "Pirate" and window.preset_label.text() == "Preset: Pirate"
    [system] = window.store.messages(conv_id)
    assert (system.role, system.content) == ("system", PIRATE)
    assert window.chat.messages[0].role == "system"  # shown in the conversation

    send(qtbot, window, "Where is the treasure?")
    wait_reply(qtbot, window)
    assert PIRATE in decoded(window)  # what the engine decoded the reply from
    reply = window.store.messages(conv_id)[-1]
    assert reply.stats is not None and reply.stats["tokens"] <= 8  # the preset's, not 32

    # Export carries it; an import brings the chat back with its preset and prompt.
    exported = tmp_path / "export.json"
    exported.write_text(to_json(read_conversations(window.store, [conv_id])), encoding="utf-8")
    document = json.loads(exported.read_text(encoding="utf-8"))
    [chat] = document["conversations"]
    assert chat["preset"] == "Pirate" and chat["messages"][0] == {
        **chat["messages"][0], "role": "system", "content": PIRATE
    }  # fmt: skip
    with ConversationStore(tmp_path / "other.sqlite3") as other:
        [new_id] = import_chat_file(other, exported).ids
        assert other.get(new_id).preset == "Pirate"
        assert other.messages(new_id)[0].content == PIRATE


def test_a_conversations_system_prompt_is_its_own_to_change(
    qtbot: QtBot, window: MainWindow
) -> None:
    window.apply_settings(window.settings.with_(system_prompt="Answer in one word."))
    new_chat_from(window, DEFAULT_PRESET)  # Default: the settings' prompt, copied
    conv_id = window.conversation.id or -1
    assert window.store.messages(conv_id)[0].content == "Answer in one word."

    shown: list[str] = []

    def answer(dialog_text: str) -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QInputDialog):
            QTimer.singleShot(20, lambda: answer(dialog_text))
            return
        shown.append(box.textValue())
        box.setTextValue(dialog_text)
        box.accept()

    QTimer.singleShot(0, lambda: answer("Answer like a poet."))
    window.system_prompt_button.click()
    qtbot.waitUntil(lambda: window.store.messages(conv_id)[0].content == "Answer like a poet.")
    assert shown == ["Answer in one word."]  # the conversation's, shown to change
    assert window.chat.messages[0].text == "Answer like a poet."  # drawn again
    send(qtbot, window, "What is the sea?")
    wait_reply(qtbot, window)
    assert "Answer like a poet." in decoded(window)
    assert "Answer in one word." not in decoded(window)  # the settings' stays theirs

    # Blank: none at all (the settings' prompt does not come back in its place).
    QTimer.singleShot(0, lambda: answer(""))
    window.system_prompt_button.click()
    qtbot.waitUntil(lambda: window.store.messages(conv_id)[0].role == "user")
    send(qtbot, window, "And the sky?")
    wait_reply(qtbot, window)
    assert "Answer in one word." not in decoded(window)


def test_a_preset_that_does_not_draft_keeps_its_replies_plain(
    qtbot: QtBot, window: MainWindow
) -> None:
    make_pirate(qtbot, window, speculation=False, max_tokens=24)
    new_chat_from(window, "Pirate")
    assert window.preset_label.text() == "Preset: Pirate · no speculation"
    send(qtbot, window, "Repeat: one two three, one two three, one two three.")
    wait_reply(qtbot, window)
    stats = window.store.messages(window.conversation.id or -1)[-1].stats
    assert stats is not None and stats["drafted_tokens"] == 0 and not stats["speculation"]
    window.conversation.new()  # Default: the toolbar's switch (on) again
    send(qtbot, window, "Repeat: one two three, one two three, one two three.")
    wait_reply(qtbot, window)
    stats = window.store.messages(window.conversation.id or -1)[-1].stats
    assert stats is not None and stats["speculation"]
