"""A pair of two tokenizers in the window, from choosing the draft to a
streamed reply and its statistics: SmolLM2 (a chat template) as the target,
Gemma-3-270M (a base model of another family) as its draft, through text."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QLabel, QPushButton
from pytestqt.qtbot import QtBot
from test_main_window import LOAD_TIMEOUT_MS, open_window, send, wait_reply
from test_models_dialog import _click, _import, _select, _wait_idle

from gambit.models.library import ModelLibrary
from gambit.storage.settings import Settings
from gambit.ui.models_dialog.dialog import ModelsDialog


def test_a_draft_of_another_tokenizer_is_chosen_and_drafts_through_text(
    qtbot: QtBot, tmp_path: Path, smol_q8_0: Path, gemma_q4_k_m: Path
) -> None:
    settings = Settings(
        target_model=str(smol_q8_0), drafter="lookup", temperature=0.0, max_tokens=24,
        context_size=1024, threads=2, policy="fixed", fixed_gamma=4,
    )  # fmt: skip
    window = open_window(qtbot, (tmp_path / "settings.json", tmp_path / "chats.sqlite3"), settings)
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)

    # Choosing it: the Models dialog says how it drafts, and OK applies it
    # (as the window's Models… action does with the dialog's choice).
    library = ModelLibrary(tmp_path / "data" / "library.json", tmp_path / "data" / "models")
    dialog = ModelsDialog(library, window.settings, window)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    _import(qtbot, dialog, smol_q8_0, gemma_q4_k_m)
    _select(qtbot, dialog, gemma_q4_k_m)
    _click(qtbot, dialog, "useDraftButton")
    pair = dialog.findChild(QLabel, "pairLabel")
    assert pair is not None
    assert f"{gemma_q4_k_m.name} drafts for {smol_q8_0.name}: through text" in pair.text()
    buttons = dialog.findChild(QDialogButtonBox)
    assert buttons is not None
    ok = buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert isinstance(ok, QPushButton)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
    _wait_idle(qtbot, dialog)
    assert window.apply_settings(dialog.chosen_settings())
    assert window.settings.drafter == "draft" and window.settings.draft_model == str(gemma_q4_k_m)

    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    drafter = window.stats.findChild(QLabel, "drafterValue")
    assert drafter is not None and drafter.text() == "Drafter: draft model (through text) · chain"

    deltas: list[object] = []
    window.worker.delta.connect(deltas.append)
    send(qtbot, window, "Repeat exactly: one, two, three, four, five, six.")
    wait_reply(qtbot, window)
    reply = window.chat.messages[-1]
    assert reply.role == "assistant" and reply.text.strip()
    assert len(deltas) >= 2  # streamed
    stored = window.store.messages(window.conversation.id or -1)[-1]
    assert stored.content == reply.text and stored.stats
    assert stored.stats["drafted_tokens"] > 0  # fixed γ: every round drafted through text
    accepted = window.stats.findChild(QLabel, "acceptedValue")
    assert accepted is not None
    n_accepted, n_drafted = stored.stats["accepted_tokens"], stored.stats["drafted_tokens"]
    # (the panel repaints on its timer: the reply's last figures within a repaint)
    qtbot.waitUntil(
        lambda: accepted.text().startswith(f"{n_accepted:,} / {n_drafted:,}"), timeout=5000
    )
    assert "tok/s" in reply.footer
    window.close()
