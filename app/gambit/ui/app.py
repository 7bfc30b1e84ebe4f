"""``gambit``: the desktop app's entry point."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gambit import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gambit", description="Gambit desktop chat")
    parser.add_argument("--version", action="version", version=f"gambit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log llama.cpp too")
    args, qt_args = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    if not args.verbose:
        logging.getLogger("gambit.llama").setLevel(logging.ERROR)

    from PySide6.QtWidgets import QApplication

    from gambit.storage.conversations import ConversationStore, default_store_path
    from gambit.storage.settings import SettingsStore
    from gambit.ui.main_window import MainWindow

    app = QApplication([sys.argv[0], *qt_args])
    app.setApplicationName("Gambit")
    app.setApplicationVersion(__version__)
    app.setStyle("Fusion")
    path = default_store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    window = MainWindow(SettingsStore(), ConversationStore(path))
    window.show()
    window.load_engine()
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
