"""The main window's menu bar: File, Edit, View, Tools, Help.

The menus reuse the window's own actions (the toolbar's Settings, Models,
Speculation and Statistics), so a shortcut, a check mark or an enabled state
is one thing wherever it shows. Shortcuts come from ``QKeySequence.StandardKey``
where the platform has one, and are written into every action's tooltip.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from gambit import __version__
from gambit.storage.chat_files.chat_export import ExportFormat
from gambit.storage.paths import log_dir
from gambit.storage.settings import Settings
from gambit.ui.window.chat_files import ChatFiles
from gambit.ui.window.conversation import Conversation
from gambit.ui.window.docs_window import DocsWindow
from gambit.ui.window.shortcuts_dialog import ShortcutsDialog, shortcut_rows
from gambit.ui.window.window_layout import WindowPanes

if TYPE_CHECKING:
    from gambit.qt.served import LocalService  # (the web stack loads only when served)
    from gambit.ui.measure.measure_dialog import MeasureDialog
    from gambit.ui.server_dialog import ServerDialog

# File → Export ▸ entries: (format, its name, what it is for)
_EXPORT_KINDS: tuple[tuple[ExportFormat, str, str], ...] = (
    ("md", "Markdown", "to read"),
    ("json", "JSON", "to import back"),
)

# Keys of about_lines() that the About box shows; the rest go to its details.
ABOUT_KEYS = ("llama-cpp-python", "backend", "gpu offload", "kernels")


def standard_keys(key: QKeySequence.StandardKey, fallback: str) -> list[QKeySequence]:
    """The platform's bindings for ``key``, or ``fallback`` where it has none
    (``Preferences`` is empty on most Linux desktops)."""
    keys = QKeySequence.keyBindings(key)
    return list(keys) if keys else [QKeySequence(fallback)]


def set_tip(action: QAction, text: str) -> None:
    """``text`` as the action's tooltip and status tip, with its shortcut if it has one."""
    key = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
    action.setToolTip(f"{text} ({key})" if key else text)
    action.setStatusTip(text)


class _AboutFetcher(QObject):
    """Runs ``about_lines()`` off the UI thread (it may probe the kernels once)."""

    ready = Signal(list)

    def start(self) -> None:
        threading.Thread(target=self._run, name="about-lines", daemon=True).start()

    def _run(self) -> None:
        # Imported when asked: the self-test's checks are not the window's start.
        from gambit.cli.selftest import about_lines

        try:
            lines = about_lines()
        except Exception as exc:  # the About box must open whatever fails
            lines = [f"details: could not be collected ({type(exc).__name__}: {exc})"]
        self.ready.emit(lines)


class MenuBar(QObject):
    """Builds the menus onto ``window`` (its panes and toolbar actions) and owns
    the actions that only they have; they act on ``conversation``, and
    ``apply_settings`` saves and uses settings the dialogs chose."""

    def __init__(
        self,
        window: WindowPanes,
        conversation: Conversation,
        apply_settings: Callable[[Settings], bool],
    ) -> None:
        super().__init__(window)
        self.window, self.conversation = window, conversation
        self.apply_settings = apply_settings
        self.local_service: LocalService | None = None  # Tools → Local server, once opened
        self._build_actions()
        self._build_menus()
        self._about: _AboutFetcher | None = None
        self._about_box: QMessageBox | None = None  # while it is open
        self._measure: MeasureDialog | None = None  # one per window: it outlives a close mid-run
        self._server: ServerDialog | None = None
        self._docs: DocsWindow | None = None  # Help → Documentation, once opened

    # ----------------------------------------------------------------- actions
    def _action(self, text: str, name: str, tip: str, keys: list[QKeySequence]) -> QAction:
        action = QAction(text, self.window)
        action.setObjectName(name)
        action.setShortcuts(keys)
        set_tip(action, tip)
        return action

    def _build_actions(self) -> None:
        w = self.window
        self.new_chat = self._action(
            "&New chat", "newChatAction", "Start a new conversation",
            standard_keys(QKeySequence.StandardKey.New, "Ctrl+N"),
        )  # fmt: skip
        self.new_chat.triggered.connect(lambda: self.conversation.new())
        w.new_button.setToolTip(self.new_chat.toolTip())
        self._build_chat_file_actions()
        self.quit = self._action(
            "&Quit", "quitAction", "Close Gambit",
            standard_keys(QKeySequence.StandardKey.Quit, "Ctrl+Q"),
        )  # fmt: skip
        self.quit.setMenuRole(QAction.MenuRole.QuitRole)
        self.quit.triggered.connect(w.close)

        self.copy = self._action(
            "&Copy", "copyAction", "Copy the selected text",
            standard_keys(QKeySequence.StandardKey.Copy, "Ctrl+C"),
        )  # fmt: skip
        self.copy.triggered.connect(self._on_copy)
        self.select_all = self._action(
            "Select &All", "selectAllAction", "Select all the text",
            standard_keys(QKeySequence.StandardKey.SelectAll, "Ctrl+A"),
        )  # fmt: skip
        self.select_all.triggered.connect(self._on_select_all)
        self.find = self._action(
            "&Find…", "findAction", "Search the conversations",
            standard_keys(QKeySequence.StandardKey.Find, "Ctrl+F"),
        )  # fmt: skip
        self.find.triggered.connect(self._on_find)

        self.stats = w.stats.toggleViewAction()
        self.stats.setObjectName("statisticsAction")
        self.stats.setText("&Statistics panel")
        self.stats.setIconText("Statistics")
        self.stats.setShortcut(QKeySequence("F9"))
        set_tip(self.stats, "Show or hide the statistics panel")
        self.sidebar = self._action(
            "S&idebar", "sidebarAction", "Show or hide the conversation list",
            [QKeySequence("Ctrl+B")],
        )  # fmt: skip
        self.sidebar.setCheckable(True)
        self.sidebar.setChecked(True)
        self.sidebar.toggled.connect(self._on_sidebar_toggled)

        w.settings_action.setText("&Settings…")
        w.settings_action.setShortcuts(
            standard_keys(QKeySequence.StandardKey.Preferences, "Ctrl+,")
        )
        w.settings_action.setMenuRole(QAction.MenuRole.PreferencesRole)
        set_tip(w.settings_action, "Models, speculation, sampling and chat settings")
        w.models_action.setText("&Models…")
        w.models_action.setShortcut(QKeySequence("Ctrl+Shift+M"))
        set_tip(w.models_action, "Choose the target and draft models, derive or download them")
        w.speculation_action.setShortcut(QKeySequence("Ctrl+Shift+P"))
        set_tip(w.speculation_action, "Speculative decoding on/off (takes effect at once)")

        self.measure = self._action(
            "Measure on my &chats…", "measureAction",
            "Replay your own conversations to see which drafter and policy pay on this machine",
            [],
        )  # fmt: skip
        self.measure.triggered.connect(self.open_measure)
        self.server = self._action(
            "Local &server…", "serverAction",
            "Serve the loaded models over an OpenAI-compatible API, for editors and scripts",
            [],
        )  # fmt: skip
        self.server.triggered.connect(self.open_server)

        self._build_help_actions()

    def _build_help_actions(self) -> None:
        """Help → Documentation, Keyboard shortcuts, About Gambit, Open log folder."""
        self.docs = self._action(
            "&Documentation", "docsAction", "Read Gambit's documentation, as installed",
            standard_keys(QKeySequence.StandardKey.HelpContents, "F1"),
        )  # fmt: skip
        self.docs.triggered.connect(self.show_docs)
        self.shortcuts = self._action(
            "&Keyboard shortcuts", "shortcutsAction", "Every keyboard shortcut of the window",
            [QKeySequence("Ctrl+/")],
        )  # fmt: skip
        self.shortcuts.triggered.connect(self.show_shortcuts)
        self.about = self._action("&About Gambit", "aboutAction", "Version and backend", [])
        self.about.setMenuRole(QAction.MenuRole.AboutRole)
        self.about.triggered.connect(self.show_about)
        self.open_logs = self._action("Open &log folder", "openLogsAction", f"Open {log_dir()}", [])
        self.open_logs.triggered.connect(self._on_open_logs)

    def _build_chat_file_actions(self) -> None:
        """File → Import chats…, Export chat ▸, Export all chats ▸ (docs/export.md)."""
        self.chat_files = files = ChatFiles(self.window, self.conversation)
        self.import_chats = self._action(
            "&Import chats…", "importChatsAction",
            "Add the conversations of a JSON file: a Gambit export, or OpenAI-style messages",
            standard_keys(QKeySequence.StandardKey.Open, "Ctrl+O"),
        )  # fmt: skip
        self.import_chats.triggered.connect(files.ask_import)
        # (menu, format) -> its action: "exportChatMarkdownAction", "exportAllJsonAction", ...
        self.exports: dict[tuple[str, ExportFormat], QAction] = {}
        for everything, scope, whose in ((False, "Chat", "this conversation"),
                                         (True, "All", "all conversations")):  # fmt: skip
            for fmt, kind, use in _EXPORT_KINDS:
                action = self._action(
                    f"&{kind}…", f"export{scope}{kind.title()}Action",
                    f"Save {whose} as {kind}, {use}", [],
                )  # fmt: skip
                action.triggered.connect(partial(files.ask_export, fmt, everything))
                self.exports[scope, fmt] = action

    def _build_menus(self) -> None:
        w = self.window
        bar = w.menuBar()
        bar.setObjectName("menuBar")
        menus = {}
        for title, name in (
            ("&File", "fileMenu"), ("&Edit", "editMenu"), ("&View", "viewMenu"),
            ("&Tools", "toolsMenu"), ("&Help", "helpMenu"),
        ):  # fmt: skip
            menu = bar.addMenu(title)
            menu.setObjectName(name)
            menu.setToolTipsVisible(True)
            menus[name] = menu
        file = menus["fileMenu"]
        file.addAction(self.new_chat)
        file.addSeparator()
        file.addAction(self.import_chats)
        for scope, title in (("Chat", "&Export chat"), ("All", "Export &all chats")):
            sub = file.addMenu(title)
            sub.setObjectName(f"export{scope}Menu")
            sub.menuAction().setObjectName(f"export{scope}MenuAction")
            sub.setToolTipsVisible(True)
            sub.addActions([self.exports[scope, "md"], self.exports[scope, "json"]])
        file.addSeparator()
        file.addAction(self.quit)
        menus["editMenu"].addActions([self.copy, self.select_all])
        menus["editMenu"].addSeparator()
        menus["editMenu"].addAction(self.find)
        menus["viewMenu"].addActions([self.stats, self.sidebar])
        tools = menus["toolsMenu"]
        tools.addAction(w.speculation_action)
        tools.addSeparator()
        tools.addActions([w.models_action, w.settings_action])
        tools.addSeparator()
        tools.addAction(self.measure)
        tools.addAction(self.server)
        menus["helpMenu"].addActions([self.docs, self.shortcuts, self.about, self.open_logs])
        self.menus = menus

    # ------------------------------------------------------------------- slots
    def _text_target(self) -> QWidget:
        """The focused widget if it edits or shows text, else the chat."""
        focus = QApplication.focusWidget()
        if focus is not None and self.window.isAncestorOf(focus) and hasattr(focus, "copy"):
            return focus
        return self.window.chat

    @Slot()
    def _on_copy(self) -> None:
        self._text_target().copy()  # type: ignore[attr-defined]

    @Slot()
    def _on_select_all(self) -> None:
        self._text_target().selectAll()  # type: ignore[attr-defined]

    @Slot()
    def _on_find(self) -> None:
        self.sidebar.setChecked(True)
        search = self.window.search
        search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        search.selectAll()

    @Slot(bool)
    def _on_sidebar_toggled(self, shown: bool) -> None:
        self.window.sidebar.setVisible(shown)

    @Slot()
    def _on_open_logs(self) -> None:
        folder = log_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.window.statusBar().showMessage(f"The log folder cannot be made: {exc}", 10000)
            return
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.window.statusBar().showMessage(f"The log folder is {folder}", 10000)

    @Slot()
    def open_server(self) -> None:
        """Tools → Local server (the web stack loads here, not at start-up)."""
        from gambit.qt.served import LocalService
        from gambit.ui.server_dialog import ServerDialog, ServerHost

        c = self.conversation
        if self.local_service is None:
            self.local_service = LocalService(c.worker, lambda: c.engine_info)
        if self._server is None:
            host = ServerHost(
                service=self.local_service,
                settings=lambda: c.settings,
                apply=self.apply_settings,
                engine_info=lambda: c.engine_info,
            )
            self._server = ServerDialog(host, self.window)
        self._server.show()
        self._server.raise_()

    @Slot()
    def open_measure(self) -> None:
        """The "Measure on my chats" dialog, window-modal: the engine is busy
        replaying while it runs, so the chat waits. (The measuring code and its
        charts load here, not at start-up.)"""
        from gambit.ui.measure.measure_candidates import library_drafts
        from gambit.ui.measure.measure_dialog import MeasureDialog, MeasureHost

        c = self.conversation
        if self._measure is None:
            host = MeasureHost(
                worker=c.worker,
                db_path=c.store.path,
                settings=lambda: c.settings,
                apply=self.apply_settings,
                engine_info=lambda: c.engine_info,
                busy=lambda: c.streaming,
                drafts=lambda: library_drafts(c.settings),
            )
            self._measure = MeasureDialog(host, self.window)
            self._measure.setWindowModality(Qt.WindowModality.WindowModal)
        elif not self._measure.running:
            self._measure.refresh_choices()
            self._measure.refresh_earlier(select_first=True)
        self._measure.show()
        self._measure.raise_()
        self._measure.activateWindow()

    @Slot()
    def show_about(self) -> None:
        """Open the About box at once; the backend's details fill it in as they
        arrive (collected in the background: a first kernel probe takes seconds)."""
        if self._about_box is not None:
            self._about_box.raise_()
            self._about_box.activateWindow()
            return
        box = QMessageBox(
            QMessageBox.Icon.NoIcon, "About Gambit", about_text(None), parent=self.window
        )
        box.setObjectName("aboutDialog")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.destroyed.connect(self._on_about_closed)
        self._about_box = box
        box.open()
        if self._about is None:  # (else the details are on their way already)
            self._about = _AboutFetcher(self)
            self._about.ready.connect(self._on_about_ready, Qt.ConnectionType.QueuedConnection)
            self._about.start()

    @Slot()
    def _on_about_closed(self) -> None:
        self._about_box = None

    @Slot(list)
    def _on_about_ready(self, lines: list[str]) -> None:
        self._about = None
        box = self._about_box
        if box is None:
            return  # closed before the details came
        box.setText(about_text(lines))
        box.setDetailedText("\n".join(lines))

    @Slot()
    def show_docs(self) -> None:
        """Help → Documentation: one window, raised again when open."""
        if self._docs is None:
            self._docs = DocsWindow(self.window)
        self._docs.show()
        self._docs.raise_()
        self._docs.activateWindow()

    @Slot()
    def show_shortcuts(self) -> None:
        """Help → Keyboard shortcuts: the window's shortcuts, read from its actions now."""
        ShortcutsDialog(shortcut_rows(self.window), self.window).open()


def about_text(lines: list[str] | None) -> str:
    """The About box's text: the version, then the ``about_lines()`` that
    ``ABOUT_KEYS`` names (None: while they are being collected)."""
    head = (
        f"<h3>Gambit {__version__}</h3>"
        "<p>Local chat with speculative decoding that shows its bet.</p>"
    )
    if lines is None:
        return head + "<p><i>Collecting version details…</i></p>"
    shown = [line for line in lines if line.split(":")[0].split(" (")[0] in ABOUT_KEYS]
    return head + "".join(f"<p>{html.escape(line)}</p>" for line in shown)
