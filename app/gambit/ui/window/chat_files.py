"""File → Import chats…, Export chat, Export all chats: the window's side of
``gambit.storage.chat_files.chat_export`` and ``gambit.storage.chat_files.chat_import``.

Each asks for a file with a non-blocking dialog, then calls the method that
takes a path (``export_to``, ``import_from``): all the work is in storage,
this module only asks, shows the imported conversation, and says how it went.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QFileDialog, QWidget

from gambit.errors import GambitError
from gambit.fsutil import write_atomic
from gambit.storage.chat_files.chat_export import (
    ExportFormat,
    export_file_name,
    export_text,
    read_conversations,
)
from gambit.storage.chat_files.chat_import import ImportResult, import_chat_file
from gambit.ui.window.conversation import Conversation, error_text
from gambit.ui.window.window_widgets import open_message
from gambit.words import counted

log = logging.getLogger(__name__)

FILTERS: dict[ExportFormat, str] = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}
IMPORT_FILTER = "Chats (*.json *.jsonl);;All files (*)"


class ChatFiles(QObject):
    """Export and import of ``conversation``'s history; the dialogs open over ``window``."""

    def __init__(self, window: QWidget, conversation: Conversation) -> None:
        super().__init__(window)
        self.window, self.conversation = window, conversation

    # ------------------------------------------------------------------ export
    def ask_export(self, fmt: ExportFormat, everything: bool) -> None:
        """Ask where to write the open conversation (or all of them) as ``fmt``."""
        ids: list[int] | None = None
        title = None
        if not everything:
            conv_id = self.conversation.id
            if conv_id is None:
                self.conversation.say("There is no conversation to export.")
                return
            ids = [conv_id]
            try:
                title = self.conversation.store.get(conv_id).title
            except GambitError as exc:
                open_message(self.window, "The chat was not exported", str(exc))
                return
        caption = "Export all chats" if everything else "Export chat"
        start = Path.home() / export_file_name(fmt, title)
        self._ask(caption, str(start), FILTERS[fmt], "exportChatsDialog",
                  lambda name: self.export_to(Path(name), fmt, ids), save_as=fmt)  # fmt: skip

    def export_to(self, path: Path, fmt: ExportFormat, ids: Sequence[int] | None) -> bool:
        """Write the conversations ``ids`` (None: all) to ``path`` as ``fmt``; False
        (and a message) if that failed."""
        try:
            conversations = read_conversations(self.conversation.store, ids)
            write_atomic(path, export_text(conversations, fmt))
        except OSError as exc:
            open_message(self.window, "The chats were not exported",
                         f"Cannot write {path}: {exc.strerror or exc}.")  # fmt: skip
            return False
        except Exception as exc:
            self._report("The chats were not exported", exc)
            return False
        if ids is not None and len(conversations) == 1:
            what = f"“{conversations[0][0].title}”"
        else:
            what = counted(len(conversations), "conversation")
        self.conversation.say(f"Exported {what} to {path}.", 10000)
        return True

    # ------------------------------------------------------------------ import
    def ask_import(self) -> None:
        """Ask for a file of conversations to import."""
        self._ask("Import chats", str(Path.home()), IMPORT_FILTER, "importChatsDialog",
                  lambda name: self.import_from(Path(name)))  # fmt: skip

    def import_from(self, path: Path) -> ImportResult | None:
        """Add the conversations in the file at ``path`` and open the first of
        them; None (and the reason, nothing imported) if the file cannot be."""
        try:
            result = import_chat_file(self.conversation.store, path)
        except Exception as exc:
            self._report("The file was not imported", exc)
            return None
        # Opened as a click would (not during a reply: the chat shows it until it ends).
        if result.ids and not self.conversation.streaming:
            self.conversation.open(result.ids[0])
        else:
            self.conversation.listed.emit(False)
        self.conversation.say(result.message(), 10000)
        if result.file.left_out:  # worth more than a line that goes away
            open_message(self.window, "Chats imported", result.message(), warning=True)
        return result

    # ----------------------------------------------------------------- helpers
    def _ask(
        self,
        caption: str,
        start: str,
        filters: str,
        name: str,
        chosen: Callable[[str], object],
        save_as: ExportFormat | None = None,
    ) -> None:
        dialog = QFileDialog(self.window, caption, start, filters)
        dialog.setObjectName(name)
        if save_as is None:
            dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
            dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptOpen)
        else:
            dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
            dialog.setDefaultSuffix(save_as)  # a name typed without one gets it
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(chosen)
        dialog.open()

    def _report(self, title: str, exc: Exception) -> None:
        open_message(self.window, title, error_text(title, exc))
