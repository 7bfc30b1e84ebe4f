"""Documents attached to the next message: picked with the Attach button
(Ctrl+Shift+O) or dropped on the window, shown as chips above the input until the
message is sent. ``gambit.storage.documents`` reads the files (refusing what
is not text, and saying why) and stores the documents in the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, QObject, Slot
from PySide6.QtGui import QAction, QDropEvent, QKeySequence
from PySide6.QtWidgets import QFileDialog, QWidget

from gambit.storage.documents import Document, DocumentError, read_document
from gambit.ui.window.menus import set_tip
from gambit.ui.window.window_layout import WindowPanes
from gambit.ui.window.window_widgets import AttachmentBar

# What the file picker offers first (any file can be chosen: content decides).
TEXT_FILES = (
    "Text files (*.txt *.md *.markdown *.rst *.csv *.tsv *.json *.jsonl *.yaml *.yml *.toml"
    " *.ini *.xml *.html *.css *.py *.js *.ts *.c *.h *.cpp *.hpp *.rs *.go *.java *.kt"
    " *.rb *.php *.sh *.sql *.log *.tex)"
)


def _local_files(data: QMimeData) -> list[Path]:
    return [Path(url.toLocalFile()) for url in data.urls() if url.isLocalFile()]


class Attachments(QObject):
    """Reads files into ``bar``: from the picker (``action``, Ctrl+Shift+O, and the
    Attach button) and from files dropped on ``window`` or on its ``targets``
    (widgets that would otherwise take a dropped file as text)."""

    def __init__(self, window: WindowPanes, bar: AttachmentBar, targets: Iterable[QWidget]) -> None:
        super().__init__(window)
        self.window, self.bar = window, bar
        self.action = QAction("&Attach a document…", window)
        self.action.setObjectName("attachAction")
        # (Ctrl+O, the standard Open, is for chat files: File → Import chats…)
        self.action.setShortcut(QKeySequence("Ctrl+Shift+O"))
        set_tip(self.action, "Attach a text file to the next message (or drop it on the window)")
        self.action.triggered.connect(self.pick)
        window.addAction(self.action)
        window.setAcceptDrops(True)
        for widget in (window, *targets):
            widget.installEventFilter(self)

    @Slot()
    def pick(self) -> QFileDialog:
        """The file picker, window-modal; the files chosen are attached."""
        dialog = QFileDialog(self.window, "Attach documents")
        dialog.setObjectName("attachDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setNameFilters([TEXT_FILES, "All files (*)"])
        dialog.filesSelected.connect(lambda files: self.add_files(Path(f) for f in files))
        dialog.open()
        return dialog

    def add_files(self, paths: Iterable[Path]) -> list[Document]:
        """Attach the text files among ``paths``; the others are refused in one
        warning that says why, file by file. Returns what was attached."""
        added: list[Document] = []
        refused: list[str] = []
        for path in paths:
            try:
                added.append(read_document(path))
            except DocumentError as exc:
                refused.append(str(exc))
        for document in added:
            self.bar.add(document)
        if added:
            self.window.input.setFocus()
        if refused:
            self.window.show_error("Not attached", "\n\n".join(refused), warning=True)
        return added

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        """Files dragged over the window are attachments (text dragged stays text)."""
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop):
            assert isinstance(event, QDropEvent)  # (drag enter and move events are ones too)
            files = _local_files(event.mimeData())
            if files:
                event.acceptProposedAction()
                if kind == QEvent.Type.Drop:
                    self.add_files(files)
                return True
        return super().eventFilter(watched, event)
