"""The main window's menu bar on real widgets (offscreen, no model loaded):
every action is there with its shortcut, and does what it says."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QApplication, QDialog, QMenu, QMessageBox, QToolBar, QWidget
from pytestqt.qtbot import QtBot
from shiboken6 import Shiboken

from gambit import __version__
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.paths import docs_dir
from gambit.storage.settings import SettingsStore
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.settings.settings_dialog import SettingsDialog
from gambit.ui.window.docs_window import DocsWindow, page_title
from gambit.ui.window.main_window import MainWindow
from gambit.ui.window.shortcuts_dialog import ShortcutsDialog

MENUS = {
    "fileMenu": (
        "File",
        [
            "newChatAction",
            "newFromPresetMenuAction",
            "attachAction",
            "importChatsAction",
            "exportChatMenuAction",
            "exportAllMenuAction",
            "quitAction",
        ],
    ),
    "editMenu": ("Edit", ["copyAction", "selectAllAction", "findAction"]),
    "messageMenu": (
        "Message",
        [
            "copyMessageAction",
            "editMessageAction",
            "branchAction",
            "deleteMessageAction",
            "regenerateAction",
            "continueAction",
            "previousMessageAction",
            "nextMessageAction",
        ],
    ),
    "viewMenu": ("View", ["statisticsAction", "sidebarAction", "completionModeAction"]),
    "toolsMenu": (
        "Tools",
        [
            "speculationAction",
            "modelsAction",
            "settingsAction",
            "presetsAction",
            "measureAction",
            "serverAction",
        ],
    ),
    "helpMenu": ("Help", ["docsAction", "shortcutsAction", "aboutAction", "openLogsAction"]),
}
SHORTCUTS = {
    "docsAction": "F1",
    "newChatAction": "Ctrl+N",
    "importChatsAction": "Ctrl+O",
    "quitAction": "Ctrl+Q",
    "findAction": "Ctrl+F",
    "settingsAction": "Ctrl+,",
    "copyAction": "Ctrl+C",
    "selectAllAction": "Ctrl+A",
    "attachAction": "Ctrl+Shift+O",
    "copyMessageAction": "Ctrl+Shift+C",
    "editMessageAction": "Ctrl+Shift+E",
    "branchAction": "Ctrl+Shift+B",
    "deleteMessageAction": "Ctrl+Shift+D",
    "regenerateAction": "Ctrl+Shift+R",
    "continueAction": "Ctrl+Shift+Return",
    "previousMessageAction": "Alt+Up",
    "nextMessageAction": "Alt+Down",
    "shortcutsAction": "Ctrl+/",
}


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path / "home"))  # logs, models, library
    store = SettingsStore(tmp_path / "settings.json")
    w = MainWindow(store, ConversationStore(tmp_path / "conversations.sqlite3"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    w.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is w, timeout=3000)
    yield w
    w.close()


def _action(window: MainWindow, name: str) -> QAction:
    action = window.findChild(QAction, name)
    assert isinstance(action, QAction), f"no action named {name!r}"
    return action


def _menu(window: MainWindow, name: str) -> QMenu:
    menu = window.menuBar().findChild(QMenu, name)
    assert isinstance(menu, QMenu), f"no menu named {name!r}"
    return menu


def _on_modal(qtbot: QtBot, seen: list[QWidget], then: Callable[[QWidget], None]) -> None:
    """Once a modal dialog is up: note it, then ``then(dialog)`` (which must close it)."""

    def check() -> None:
        dialog = QApplication.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(20, check)
            return
        seen.append(dialog)
        then(dialog)

    QTimer.singleShot(0, check)


def test_menus_hold_the_conventional_actions_with_their_shortcuts(window: MainWindow) -> None:
    titles = [a.text().replace("&", "") for a in window.menuBar().actions()]
    assert titles == [title for title, _ in MENUS.values()]
    for menu_name, (_, names) in MENUS.items():
        shown = [a.objectName() for a in _menu(window, menu_name).actions() if not a.isSeparator()]
        assert shown == names, menu_name
    for name, key in SHORTCUTS.items():
        action = _action(window, name)
        assert QKeySequence(key) in action.shortcuts(), (name, action.shortcuts())
        native = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        assert native and native in action.toolTip(), (name, action.toolTip())

    # The toolbar's actions are the menus' own: one shortcut, one check mark.
    toolbar = window.findChild(QToolBar, "mainToolbar")
    assert isinstance(toolbar, QToolBar)
    tools = _menu(window, "toolsMenu").actions()
    for action in toolbar.actions():
        if action.isSeparator():
            continue
        assert action in tools or action is _action(window, "statisticsAction")
        key = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        assert key and f"({key})" in action.toolTip(), action.objectName()
    assert window.settings_action in tools and window.models_action in tools


def test_new_chat_shortcut_creates_a_conversation(qtbot: QtBot, window: MainWindow) -> None:
    before = len(window.store.list(""))
    first = window.conversation.id
    window.store.add_message(first or -1, "user", "hello")  # so the new chat is a new row
    qtbot.keyClick(window.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert len(window.store.list("")) == before + 1
    assert window.conversation.id != first
    assert window.chat.messages == []
    _action(window, "newChatAction").trigger()
    assert len(window.store.list("")) == before + 2


def test_find_focuses_the_sidebar_search(qtbot: QtBot, window: MainWindow) -> None:
    window.search.setText("old query")
    _action(window, "sidebarAction").setChecked(False)
    assert not window.sidebar.isVisible()
    window.input.setFocus()
    qtbot.keyClick(window.input, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert window.sidebar.isVisible()
    assert window.search.hasFocus()
    assert window.search.selectedText() == "old query"  # typing replaces it


def test_a_search_keeps_the_open_conversation_only_while_it_matches(window: MainWindow) -> None:
    store = window.store
    boats = store.create("Boats")
    store.add_message(boats, "user", "How do sails work?")
    soup = store.create("Soup")
    store.add_message(soup, "user", "A recipe for leek soup, please.")
    window.conversation.open(boats)
    assert window.chat.messages[0].text == "How do sails work?"

    window.search.setText("sail")  # it matches: it stays open
    assert window.conversation.id == boats
    window.search.setText("leek")  # it does not: the match opens
    assert window.conversation.id == soup
    assert window.chat.messages[0].text == "A recipe for leek soup, please."
    current = window.list.currentItem()
    assert current is not None and window.list.conversation_id(current) == soup
    window.search.setText("nothing like this")  # no match: nothing else to open
    assert window.list.count() == 0 and window.conversation.id == soup
    window.search.clear()
    assert window.conversation.id == soup and window.list.count() >= 2


def test_view_menu_toggles_the_statistics_and_the_sidebar(window: MainWindow) -> None:
    stats = _action(window, "statisticsAction")
    sidebar = _action(window, "sidebarAction")
    assert stats.isChecked() == window.stats.isVisible()
    was = window.stats.isVisible()
    stats.trigger()
    assert window.stats.isVisible() is not was
    stats.trigger()
    assert window.stats.isVisible() is was
    assert sidebar.isChecked() and window.sidebar.isVisible()
    sidebar.trigger()
    assert not window.sidebar.isVisible()
    sidebar.trigger()
    assert window.sidebar.isVisible()


def test_copy_and_select_all_act_on_the_chat(window: MainWindow) -> None:
    from gambit.ui.window.chat_view import ChatMessage

    window.chat.set_messages([ChatMessage("user", "copy me please")])
    window.chat.setFocus()
    QGuiApplication.clipboard().clear()
    _action(window, "selectAllAction").trigger()
    assert "copy me please" in window.chat.textCursor().selectedText()
    _action(window, "copyAction").trigger()
    assert "copy me please" in QGuiApplication.clipboard().text()


def test_settings_and_models_open_their_dialogs(qtbot: QtBot, window: MainWindow) -> None:
    seen: list[QWidget] = []

    def close(dialog: QWidget) -> None:
        assert isinstance(dialog, QDialog)
        dialog.reject()

    _on_modal(qtbot, seen, close)
    qtbot.keyClick(window.input, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert len(seen) == 1 and isinstance(seen[0], SettingsDialog)

    _on_modal(qtbot, seen, close)
    _action(window, "modelsAction").trigger()
    assert len(seen) == 2 and isinstance(seen[1], ModelsDialog)
    assert window.settings_store.load() == window.settings  # cancelled: nothing saved


def test_measure_opens_its_dialog_which_waits_for_a_model(qtbot: QtBot, window: MainWindow) -> None:
    from gambit.ui.measure.measure_dialog import MeasureDialog

    window.store.add_message(window.conversation.id or -1, "user", "hello")
    _action(window, "measureAction").trigger()
    dialog = window.findChild(MeasureDialog, "measureDialog")
    assert isinstance(dialog, MeasureDialog) and dialog.isVisible()
    assert dialog.isModal()  # window-modal: the chat waits while the engine replays
    assert dialog.conversations.count() == 1
    dialog.start_button.click()  # no model loaded in this window
    assert not dialog.running
    assert "not loaded" in dialog.status.text()
    dialog.close()
    _action(window, "measureAction").trigger()  # one dialog per window, shown again
    assert window.findChildren(MeasureDialog) == [dialog] and dialog.isVisible()
    dialog.close()


def test_about_names_version_llama_cpp_backend_and_kernels(
    qtbot: QtBot, window: MainWindow
) -> None:
    _action(window, "aboutAction").trigger()

    def box() -> QMessageBox:
        found = window.findChild(QMessageBox, "aboutDialog")
        assert isinstance(found, QMessageBox) and found.isVisible()
        return found

    # Open at once, before any event is processed: the details (a kernel
    # probe on a first start) are collected in the background and only
    # delivered by the event loop, so they cannot have been waited for.
    assert "Collecting version details" in box().text()
    assert f"Gambit {__version__}" in box().text()
    qtbot.waitUntil(lambda: "llama-cpp-python:" in box().text(), timeout=30_000)
    text = box().text()
    assert f"Gambit {__version__}" in text
    for key in ("llama-cpp-python:", "backend:", "kernels"):
        assert key in text, text
    assert "log folder:" in box().detailedText()
    box().close()


def test_keyboard_shortcuts_lists_every_action_that_has_one(
    qtbot: QtBot, window: MainWindow
) -> None:
    _action(window, "shortcutsAction").trigger()
    dialog = window.findChild(ShortcutsDialog, "shortcutsDialog")
    assert isinstance(dialog, ShortcutsDialog) and dialog.isVisible()
    rows = dict(dialog.rows())
    native = QKeySequence.SequenceFormat.NativeText
    # Every action of the window with a shortcut, by its name, with its keys...
    with_keys = [a for a in window.findChildren(QAction) if not a.shortcut().isEmpty()]
    assert len(with_keys) >= len(SHORTCUTS)
    for action in with_keys:
        name = action.text().replace("&", "").removesuffix("…").strip()
        assert action.shortcut().toString(native) in rows[name], name
    # ...the menus' (the toolbar's, the panel's toggle) among them...
    for name, keys in SHORTCUTS.items():
        label = _action(window, name).text().replace("&", "").removesuffix("…").strip()
        assert QKeySequence(keys).toString(native) in rows[label], name
    assert rows["Statistics panel"] == QKeySequence("F9").toString(native)
    # ...and the message box's own keys, which are no actions.
    assert rows["Send the message"] == QKeySequence("Return").toString(native)
    assert len(rows) == len(dialog.rows())  # each once
    dialog.close()


class _UrlCatcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


def test_open_log_folder(window: MainWindow, tmp_path: Path) -> None:
    catcher = _UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    try:
        _action(window, "openLogsAction").trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [Path(u.toLocalFile()) for u in catcher.urls] == [tmp_path / "home" / "logs"]
    assert (tmp_path / "home" / "logs").is_dir()


def test_quit_closes_the_window(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.keyClick(window.input, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=3000)


def _two_owners(top: QWidget) -> list[str]:
    """The objects under ``top`` that Python owns although a Qt parent owns them
    too: at exit PySide deletes the first, and a parent may delete them again.
    (Read from the binding's table: findChildren would settle what it finds.)"""
    found = []
    for obj in Shiboken.getAllValidWrappers():
        if not isinstance(obj, QObject) or not Shiboken.ownedByPython(obj):
            continue
        parent = obj.parent()
        ancestor = parent
        while ancestor is not None and ancestor is not top:
            ancestor = ancestor.parent()
        if ancestor is top:
            assert parent is not None
            found.append(f"{type(obj).__name__} {obj.objectName()!r} in {parent.objectName()!r}")
    return found


def test_the_window_and_its_dialogs_leave_each_widget_one_owner(
    qtbot: QtBot, window: MainWindow
) -> None:
    assert _two_owners(window) == []
    seen: list[QWidget] = []

    def inside(dialog: QWidget) -> None:
        # (exec() hands the dialog itself to Python while it runs)
        assert _two_owners(dialog) == []
        assert isinstance(dialog, QDialog)
        dialog.reject()

    for action in ("settingsAction", "modelsAction"):
        _on_modal(qtbot, seen, inside)
        _action(window, action).trigger()
        dialog = seen[-1]
        # Deleted once done, by the event loop: not left with two owners until exit.
        qtbot.waitUntil(lambda dialog=dialog: not Shiboken.isValid(dialog), timeout=3000)
    assert [type(d).__name__ for d in seen] == ["SettingsDialog", "ModelsDialog"]
    for action, name in (("measureAction", "measureDialog"), ("serverAction", "serverDialog")):
        _action(window, action).trigger()  # shown, and kept for the next time
        assert _two_owners(window) == [], action
        shown = [
            o for o in Shiboken.getAllValidWrappers()
            if isinstance(o, QDialog) and o.objectName() == name and o.isVisible()
        ]  # fmt: skip
        assert len(shown) == 1, name
        shown[0].close()
    assert _two_owners(window) == []


def test_help_documentation_shows_the_pages_installed_with_the_app(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    qtbot.keyClick(window.input, Qt.Key.Key_F1)
    docs = window.findChild(DocsWindow, "docsWindow")
    assert isinstance(docs, DocsWindow) and docs.isVisible()
    root = docs_dir()
    assert root is not None and docs.shown == root / "README.md"
    assert docs.browser.toPlainText().startswith("Gambit\n")  # its first heading, rendered
    titles = [docs.pages.item(i).text() for i in range(docs.pages.count())]
    for page in sorted((root / "docs").glob("*.md")):  # every guide, by its heading
        assert page_title(page) in titles
    assert "Export and import conversations" in titles
    assert any(t.startswith("Design 27: Learning in proportion") for t in titles)

    # A link to another page opens it here; a web link goes to the system
    # browser; a link to anything else (a source file) is not followed.
    docs.browser.anchorClicked.emit(QUrl("docs/export.md"))
    assert docs.shown == root / "docs" / "export.md"
    assert docs.pages.currentItem().text() == "Export and import conversations"
    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", opened.append)
    docs.browser.anchorClicked.emit(QUrl("https://pyinstaller.org"))
    docs.browser.anchorClicked.emit(QUrl("../app/gambit/storage/chat_files/chat_export.py"))
    assert opened == [QUrl("https://pyinstaller.org")]
    assert docs.shown == root / "docs" / "export.md"
    _action(window, "docsAction").trigger()  # once open, the same window again
    assert window.findChildren(DocsWindow) == [docs]


def test_documentation_that_is_not_installed_says_so(qtbot: QtBot, tmp_path: Path) -> None:
    docs = DocsWindow(None, tmp_path)
    qtbot.addWidget(docs)
    docs.show()
    assert docs.pages.count() == 0 and docs.missing.isVisible()
    assert docs.shown is None
