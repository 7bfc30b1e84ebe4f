"""Actions on one message of the chat: its context menu, its keys, the Message menu.

Copy message, Edit and resend (a user message; the messages after it are
replaced, as the edit dialog says before it sends), Branch from here (a new
conversation up to the message), Delete message, Regenerate (any reply; the
messages after it go, after a confirmation) and Continue (the last reply,
when something other than the model ended it). They act on the message
right-clicked, or the current one (clicked, or stepped to with Alt+Up and
Alt+Down), or else the last message they fit. What they change goes through
the open ``Conversation`` as typed messages do, so the lookup memory of
earlier chats and the autosave see them too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.documents import compose, documents_in, format_size, typed_text
from gambit.ui.window.chat_view import ChatMessage
from gambit.ui.window.conversation import Conversation
from gambit.ui.window.menus import set_tip
from gambit.words import counted


@dataclass(frozen=True)
class Now:
    """What the actions' enabling depends on."""

    busy: bool  # a reply streams
    ready: bool  # a model is loaded
    continuable: bool  # the last message is a reply that Continue may go on with


@dataclass(frozen=True)
class MessageAction:
    """One per-message action, declared once: the Message menu, the context
    menu, its key and its enabling are all read from this."""

    name: str  # the QAction's object name
    text: str
    keys: str
    tip: str
    run: Callable[[MessageActions], None]
    enabled: Callable[[Now], bool]
    # Whether it is offered in the context menu of a message (is it the last?);
    # None: the Message menu's only (stepping through the messages).
    fits: Callable[[ChatMessage, bool], bool] | None
    offered_disabled: bool = True  # False: left out of a context menu while disabled


# What each action that reads the stored conversation does, for its error line.
_DONE = {"edit": "edited", "branch": "branched", "delete": "deleted", "regenerate": "regenerated"}


def confirm(parent: QWidget, title: str, text: str, yes: str, then: Callable[[], None]) -> None:
    """A window-modal question that calls ``then`` when ``yes`` is chosen (it
    does not block the event loop)."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text, parent=parent)
    box.setObjectName("confirmDialog")
    button = box.addButton(yes, QMessageBox.ButtonRole.AcceptRole)
    button.setObjectName("confirmButton")
    button.clicked.connect(then)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.setWindowModality(Qt.WindowModality.WindowModal)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()


class EditDialog(QDialog):
    """A user message's text, to change and send again; its documents stay
    attached, and the dialog says which messages sending replaces."""

    def __init__(self, parent: QWidget, content: str, n_after: int) -> None:
        super().__init__(parent)
        self.setObjectName("editMessageDialog")
        self.setWindowTitle("Edit and resend")
        self.documents = documents_in(content)
        layout = QVBoxLayout(self)
        self.editor = QPlainTextEdit(typed_text(content))
        self.editor.setObjectName("editMessageText")
        layout.addWidget(self.editor)
        if self.documents:
            names = ", ".join(f"{d.name} ({format_size(d.size)})" for d in self.documents)
            layout.addWidget(QLabel(f"Attached: {names}"))
        after = f" and the {counted(n_after, 'message')} after it" if n_after else ""
        note = QLabel(f"Sending replaces this message{after}.")
        note.setObjectName("editMessageNote")
        layout.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.send = buttons.addButton(
            "Replace and send" if n_after else "Send", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.send.setObjectName("editSendButton")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.editor.textChanged.connect(self._on_changed)
        self.resize(560, 320)

    def content(self) -> str:
        return compose(self.editor.toPlainText().strip(), self.documents)

    @Slot()
    def _on_changed(self) -> None:
        self.send.setEnabled(bool(self.editor.toPlainText().strip() or self.documents))


class MessageActions(QObject):
    """The per-message actions of ``conversation``'s chat, in ``window``'s menus
    and keys."""

    def __init__(self, window: QMainWindow, conversation: Conversation) -> None:
        super().__init__(window)
        self.window, self.conversation, self.chat = window, conversation, conversation.chat
        self.actions: dict[str, QAction] = {}
        for spec in ACTIONS:
            action = QAction(spec.text, window)
            action.setObjectName(spec.name)
            action.setShortcut(QKeySequence(spec.keys))
            set_tip(action, spec.tip)
            action.triggered.connect(partial(spec.run, self))
            window.addAction(action)  # (its key works wherever the focus is)
            self.actions[spec.name] = action
        self.chat.message_menu.connect(self._on_menu)

    def menu(self, title: str) -> QMenu:
        """The actions as a menu for the menu bar: those on a message, then
        the steps from one message to the next."""
        menu = QMenu(title, self.window.menuBar())
        menu.setObjectName("messageMenu")
        menu.setToolTipsVisible(True)
        menu.addActions([self.actions[a.name] for a in ACTIONS if a.fits is not None])
        menu.addSeparator()
        menu.addActions([self.actions[a.name] for a in ACTIONS if a.fits is None])
        return menu

    def update(self, continuable: bool) -> None:
        """Enable what can be done now (the message's own fit is checked when
        used); ``continuable``: the last message is a reply that Continue may go on with."""
        c = self.conversation
        now = Now(c.streaming, c.engine_info is not None, continuable)
        for spec in ACTIONS:
            self.actions[spec.name].setEnabled(spec.enabled(now))

    @Slot(QMenu, int)
    def _on_menu(self, menu: QMenu, index: int) -> None:
        """A message's context menu: the actions that fit it."""
        message = self.chat.messages[index]
        last = index == len(self.chat.messages) - 1
        menu.addSeparator()
        for spec in ACTIONS:
            action = self.actions[spec.name]
            shown = spec.offered_disabled or action.isEnabled()
            if spec.fits is not None and spec.fits(message, last) and shown:
                menu.addAction(action)

    # ----------------------------------------------------------- the target
    def _target(self, role: str | None = None) -> ChatMessage | None:
        """The current message if it fits ``role`` (None: any), else the last one that does."""
        chat = self.chat
        fits = [i for i, m in enumerate(chat.messages) if role is None or m.role == role]
        index = chat.current if chat.current in fits else (fits[-1] if fits else None)
        return None if index is None else chat.messages[index]

    def _stored(self, message: ChatMessage | None, what: str) -> list[StoredMessage] | None:
        """The conversation as stored, when ``message`` is in it (else a status line)."""
        msg_id = message.id if message is not None else None
        return self.conversation.stored_with(msg_id, what, _DONE[what])

    # -------------------------------------------------------------- actions
    @Slot()
    def copy_message(self) -> None:
        message = self._target()
        if message is not None:
            QGuiApplication.clipboard().setText(message.text)
            self.chat.last_copied = message.text
            self.conversation.say("Message copied.", 3000)

    @Slot()
    def edit_message(self) -> None:
        message = self._target("user")
        stored = self._stored(message, "edit")
        if message is None or stored is None or self.conversation.engine_info is None:
            return
        at = next(i for i, m in enumerate(stored) if m.id == message.id)
        dialog = EditDialog(self.window, stored[at].content, len(stored) - at - 1)
        msg_id = stored[at].id
        dialog.accepted.connect(lambda: self.conversation.send_edited(msg_id, dialog.content()))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.setWindowModality(Qt.WindowModality.WindowModal)
        dialog.open()

    @Slot()
    def branch(self) -> None:
        message = self._target()
        if self._stored(message, "branch") is None or message is None or message.id is None:
            return
        self.conversation.branch(message.id)

    @Slot()
    def delete_message(self) -> None:
        message = self._target()
        if self._stored(message, "delete") is None or message is None or message.id is None:
            return
        msg_id = message.id
        who = "your message" if message.role == "user" else "this reply"
        confirm(self.window, "Delete message", f"Delete {who}? This cannot be undone.",
                "Delete", lambda: self.conversation.delete_message(msg_id))  # fmt: skip

    @Slot()
    def regenerate(self) -> None:
        message = self._target("assistant")
        stored = self._stored(message, "regenerate")
        if message is None or stored is None:
            return
        n_after = len(stored) - 1 - next(i for i, m in enumerate(stored) if m.id == message.id)
        reply_id = message.id
        if not n_after:
            self.conversation.regenerate(reply_id)
            return
        confirm(
            self.window, "Regenerate",
            f"Write this reply again? The {counted(n_after, 'message')} after it will be deleted.",
            "Regenerate", lambda: self.conversation.regenerate(reply_id),
        )  # fmt: skip


def _stored(message: ChatMessage) -> bool:
    return message.id is not None


ACTIONS: tuple[MessageAction, ...] = (
    MessageAction(
        "copyMessageAction", "&Copy message", "Ctrl+Shift+C", "Copy the whole message",
        MessageActions.copy_message, lambda now: True, lambda m, last: True,
    ),
    MessageAction(
        "editMessageAction", "&Edit and resend…", "Ctrl+Shift+E",
        "Change one of your messages and send it again; the messages after it are replaced",
        MessageActions.edit_message, lambda now: now.ready and not now.busy,
        lambda m, last: _stored(m) and m.role == "user",
    ),
    MessageAction(
        "branchAction", "&Branch from here", "Ctrl+Shift+B",
        "Start a new conversation with this message and those before it",
        MessageActions.branch, lambda now: not now.busy, lambda m, last: _stored(m),
    ),
    MessageAction(
        "deleteMessageAction", "&Delete message…", "Ctrl+Shift+D", "Delete this message",
        MessageActions.delete_message, lambda now: not now.busy, lambda m, last: _stored(m),
    ),
    MessageAction(
        "regenerateAction", "&Regenerate", "Ctrl+Shift+R",
        "Write this reply again; the messages after it are replaced",
        MessageActions.regenerate, lambda now: now.ready and not now.busy,
        lambda m, last: _stored(m) and m.role == "assistant",
    ),
    MessageAction(
        "continueAction", "C&ontinue", "Ctrl+Shift+Return",
        "Go on with the last reply where its length limit, Stop or a crash cut it",
        lambda actions: actions.conversation.continue_reply(),
        lambda now: now.ready and not now.busy and now.continuable,
        lambda m, last: _stored(m) and last, offered_disabled=False,
    ),
    MessageAction(
        "previousMessageAction", "&Previous message", "Alt+Up", "Make the message above current",
        lambda actions: actions.chat.step_message(-1), lambda now: True, None,
    ),
    MessageAction(
        "nextMessageAction", "&Next message", "Alt+Down", "Make the message below current",
        lambda actions: actions.chat.step_message(1), lambda now: True, None,
    ),
)  # fmt: skip
