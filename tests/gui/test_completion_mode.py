"""A base model in the window: Gemma-3-270M has no chat template, so its
conversations open in completion mode, one text that the model continues in
place; the Models dialog says so before the model loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot
from test_main_window import LOAD_TIMEOUT_MS, open_window, send, wait_reply
from test_models_dialog import _click, _import, _select

from gambit.models.library import ModelLibrary
from gambit.storage.settings import Settings
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.window.main_window import MainWindow

TEXT = "The three primary colours of light are red, green and"


def _base_window(qtbot: QtBot, tmp_path: Path, settings: Settings) -> MainWindow:
    window = open_window(qtbot, (tmp_path / "settings.json", tmp_path / "chats.sqlite3"), settings)
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    return window


def _continues(qtbot: QtBot, window: MainWindow, text: str) -> str:
    """Send ``text`` in completion mode; the stored continuation."""
    conv_id = window.conversation.id
    assert conv_id is not None and window.store.get(conv_id).completion
    send(qtbot, window, text)
    wait_reply(qtbot, window)
    *_, asked, reply = window.store.messages(conv_id)
    assert (asked.role, asked.content) == ("user", text)  # as typed, not trimmed
    assert reply.role == "assistant" and reply.content.strip() and reply.stats
    return reply.content


@pytest.fixture
def base_settings(gemma_q4_k_m: Path) -> Settings:
    return Settings(
        target_model=str(gemma_q4_k_m), drafter="lookup", temperature=0.0, max_tokens=12,
        context_size=1024, threads=2,
    )  # fmt: skip


def test_a_base_model_continues_the_text_in_place(
    qtbot: QtBot, tmp_path: Path, base_settings: Settings
) -> None:
    window = _base_window(qtbot, tmp_path, base_settings)
    assert (
        window.conversation.engine_info is not None
        and not window.conversation.engine_info.chat_template
    )
    # The empty chat opened before the model loaded follows it into completion mode.
    assert window.writing.action.isChecked()
    first = _continues(qtbot, window, TEXT + " ")
    # One text on screen: the typed part and the model's, inline, then the footer.
    shown = window.chat.toPlainText()
    assert shown.startswith(TEXT + " " + first)
    assert "You" not in shown.splitlines()[0] and "tok/s" in shown.splitlines()[-1]

    # Continue (and Enter with nothing typed) writes more of the same text.
    assert window.continue_button.isEnabled()
    window.continue_button.click()
    wait_reply(qtbot, window)
    conv_id = window.conversation.id
    assert conv_id is not None
    parts = window.store.messages(conv_id)
    assert [m.role for m in parts] == ["user", "assistant", "assistant"]
    assert parts[2].content and window.chat.toPlainText().startswith(
        TEXT + " " + first + parts[2].content
    )
    # A system prompt (a chat from a preset keeps one) is no part of the text.
    window.store.set_system_prompt(conv_id, "You are a poet.")
    window.conversation.show(conv_id)
    assert window.chat.toPlainText().startswith(TEXT)
    # The mode is stored with the conversation: it reopens as one text.
    window.conversation.new()
    window.conversation.open(conv_id)
    assert window.writing.action.isChecked() and window.chat.completion
    window.close()


def test_a_chat_with_a_base_model_says_what_to_do_and_completion_mode_is_a_switch(
    qtbot: QtBot, tmp_path: Path, base_settings: Settings
) -> None:
    window = _base_window(qtbot, tmp_path, base_settings)
    conv_id = window.conversation.id
    assert conv_id is not None
    window.writing.action.setChecked(False)  # any conversation may be written as turns
    assert not window.store.get(conv_id).completion
    errors: list[tuple[str, str]] = []
    window.show_error = lambda title, message, warning=False: errors.append((title, message))  # type: ignore[method-assign]
    window.input.setPlainText("Hello there")
    window.send_button.click()
    assert not window.conversation.streaming and window.input.toPlainText() == "Hello there"
    assert errors and "View → Completion mode" in errors[0][1]
    window.writing.action.setChecked(True)
    assert window.store.get(conv_id).completion
    _continues(qtbot, window, "Hello there")
    window.close()


def test_a_base_model_drafted_through_text_by_another_tokenizer(
    qtbot: QtBot, tmp_path: Path, base_settings: Settings, smol_q8_0: Path
) -> None:
    settings = base_settings.with_(
        drafter="draft", draft_model=str(smol_q8_0), policy="fixed", fixed_gamma=4
    )
    window = _base_window(qtbot, tmp_path, settings)
    assert (
        window.conversation.engine_info is not None
        and window.conversation.engine_info.drafter_label
    )
    _continues(qtbot, window, "One, two, three, four, five, six, seven,")
    conv_id = window.conversation.id
    assert conv_id is not None
    stats = window.store.messages(conv_id)[-1].stats
    assert stats is not None and stats["drafted_tokens"] > 0  # fixed γ: every round drafts
    window.close()


def test_the_models_dialog_names_the_mode_before_loading(
    qtbot: QtBot, tmp_path: Path, gemma_q4_k_m: Path, smol_q8_0: Path
) -> None:
    library = ModelLibrary(tmp_path / "library.json", tmp_path / "models")
    dialog = ModelsDialog(library, Settings(target_model=str(smol_q8_0)))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    _import(qtbot, dialog, smol_q8_0, gemma_q4_k_m)
    pair = dialog.findChild(QLabel, "pairLabel")
    assert pair is not None
    _select(qtbot, dialog, gemma_q4_k_m)
    _click(qtbot, dialog, "useTargetButton")
    assert "completion mode" in pair.text()
    _select(qtbot, dialog, smol_q8_0)
    _click(qtbot, dialog, "useTargetButton")
    assert "completion mode" not in pair.text()
