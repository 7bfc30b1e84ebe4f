"""Help → Documentation: the documentation shipped with the app, read in it.

The README and each page of ``docs/`` (their first heading names them in the
list), rendered from their Markdown by Qt, with their images. A link to
another page opens it here; a web link opens in the system browser; a link
to anything else (a source file named in a design record) is not followed.
Nothing is fetched: the pages are the ones installed with this version.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Final

from PySide6.QtCore import Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QTextDocument
from PySide6.QtWidgets import (
    QDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from gambit.storage.paths import docs_dir

log = logging.getLogger(__name__)

WEB_SCHEMES: Final = frozenset({"http", "https", "mailto"})
MISSING: Final = (
    "The documentation is not installed with this copy of Gambit (the README and the "
    "docs folder are missing)."
)


def page_title(path: Path) -> str:
    """A page's first heading ("Export and import conversations"), else its name."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("# "):
                    return line[2:].strip().replace("`", "")
    except OSError:
        pass
    return path.stem


def doc_pages(root: Path) -> list[tuple[str, Path]]:
    """(title, file) of each page: the README first ("Gambit"), then ``docs/``'s
    pages, then the design records (``docs/adr``), each by name."""
    pages = [("Gambit: getting started", root / "README.md")]
    pages += [(page_title(path), path) for path in sorted((root / "docs").glob("*.md"))]
    for path in sorted((root / "docs" / "adr").glob("*.md")):
        number = re.match(r"\d+", path.stem)
        title = re.sub(r"^(ADR[- ]?)?\d+[.:]?\s*", "", page_title(path))  # (its number, once)
        pages.append((f"Design {int(number.group()) if number else path.stem}: {title}", path))
    return pages


class DocsWindow(QDialog):
    """The pages on the left, the page chosen on the right."""

    def __init__(self, parent: QWidget | None = None, root: Path | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("docsWindow")
        self.setWindowTitle("Gambit documentation")
        self.resize(1000, 720)
        self.setWindowFlag(Qt.WindowType.WindowMaximizeButtonHint, True)
        self.root = root if root is not None else docs_dir()
        self.pages = QListWidget()
        self.pages.setObjectName("docsPages")
        self.pages.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.pages.setTextElideMode(Qt.TextElideMode.ElideRight)  # (whole in the tooltip)
        self.browser = QTextBrowser()
        self.browser.setObjectName("docsBrowser")
        self.browser.setOpenLinks(False)  # every click comes to _on_link
        self.browser.anchorClicked.connect(self._on_link)
        self.missing = QLabel(MISSING)
        self.missing.setObjectName("docsMissing")
        self.missing.setWordWrap(True)
        splitter = QSplitter()
        splitter.addWidget(self.pages)
        splitter.addWidget(self.browser)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 740])
        layout = QVBoxLayout(self)
        layout.addWidget(self.missing)
        layout.addWidget(splitter, 1)
        self.pages.currentItemChanged.connect(self._on_page)
        for title, path in doc_pages(self.root) if self.root is not None else []:
            if path.is_file():
                item = QListWidgetItem(title)
                item.setData(Qt.ItemDataRole.UserRole, str(path))
                item.setToolTip(f"{title}\n{path}")
                self.pages.addItem(item)
        self.missing.setVisible(self.pages.count() == 0)
        if self.pages.count():
            self.pages.setCurrentRow(0)

    @property
    def shown(self) -> Path | None:
        """The page on the right (None: none)."""
        source = self.browser.source()
        return Path(source.toLocalFile()) if source.isLocalFile() else None

    def open_page(self, path: Path, fragment: str = "") -> None:
        """Show ``path`` (a page), at heading ``fragment`` if it names one."""
        url = QUrl.fromLocalFile(str(path))
        if fragment:
            url.setFragment(fragment)
        self.browser.setSource(url, QTextDocument.ResourceType.MarkdownResource)
        for row in range(self.pages.count()):
            item = self.pages.item(row)
            if Path(item.data(Qt.ItemDataRole.UserRole)) == path:
                self.pages.blockSignals(True)
                self.pages.setCurrentRow(row)
                self.pages.blockSignals(False)

    @Slot(object, object)
    def _on_page(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is not None:
            self.open_page(Path(item.data(Qt.ItemDataRole.UserRole)))

    @Slot(QUrl)
    def _on_link(self, url: QUrl) -> None:
        if url.scheme().lower() in WEB_SCHEMES:
            QDesktopServices.openUrl(url)  # the system browser, never inside the app
            return
        target = self.browser.source().resolved(url) if url.isRelative() else url
        path = Path(target.toLocalFile()) if target.isLocalFile() else None
        if path is not None and path.suffix == ".md" and path.is_file():
            self.open_page(path, target.fragment())
        elif url.hasFragment() and not url.path():  # a heading of this page
            self.browser.scrollToAnchor(url.fragment())
        else:
            log.info("documentation link not followed: %s", url.toDisplayString())
