"""``gambit``: the desktop app's entry point.

``gambit --self-test [options]`` and ``gambit --about`` answer on the terminal
without opening a window (they work with no display); anything else starts
the GUI. Logging and the crash handler are set up first, in every mode.

Each mode imports what it runs, inside ``main``: a bundle's children (the
kernel probe, pip, the quantizer, the window check) and the terminal modes
start without Qt or the window, and the window's start pays for nothing else.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

_T_START = time.time()  # the earliest timestamp we have (the self-test's fallback)

from gambit import __version__  # noqa: E402  (after the timestamp, on purpose)
from gambit.models.child_process import BUNDLE_FLAGS  # noqa: E402
from gambit.storage.paths import resources_dir  # noqa: E402

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def icon_files() -> list[Path]:
    """The app icon's PNG renderings, smallest first (empty if not found)."""
    folder = resources_dir()
    if folder is None:
        return []
    return [p for size in ICON_SIZES if (p := folder / "icons" / f"gambit-{size}.png").is_file()]


def _show_crash_box(report: Path, summary: str) -> None:
    """Tell the GUI user where the crash report is (from any thread)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    app = QApplication.instance()
    if app is None or QApplication.platformName() == "offscreen":
        return  # no one to show it to; the report and the log have it

    def show() -> None:
        QMessageBox.critical(
            None,
            "Gambit: unexpected error",
            f"Gambit hit an unexpected error:\n\n{summary}\n\n"
            f"A report was written to:\n{report}\n\n"
            "Please attach it to a bug report. Gambit may be unstable until restarted.",
        )

    if threading.current_thread() is threading.main_thread():
        show()
    else:
        QTimer.singleShot(0, app, show)  # runs on the GUI thread


def _run_bundled(flag: str, argv: Sequence[str]) -> int:
    """In a frozen bundle, the child's side of ``module_command``: pip or the
    quantizer. (Imported here, not at the top: a child starts without the UI.)"""
    if BUNDLE_FLAGS[flag] == "pip":
        try:
            from pip._internal.cli.main import main as pip_main
        except ImportError:
            print("this build of Gambit has no pip to download with", file=sys.stderr)
            return 2
        return int(pip_main(list(argv)) or 0)
    from gambit.models.derive import quantizer_main

    return quantizer_main(argv)


def _import_ui() -> None:
    """The self-test's check that the whole UI is there (bundled, importable)."""
    import gambit.ui.window.main_window  # noqa: F401


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--gambit-kernel-probe"]:  # a bundle starts itself as the probe child
        from gambit.engine.machine.kernel_child import child_main

        return child_main(args_in[1:])
    if args_in[:1] and args_in[0] in BUNDLE_FLAGS:  # a bundle starts itself as pip / derive
        return _run_bundled(args_in[0], args_in[1:])
    if args_in[:1] == ["--gambit-window-probe"]:  # the self-test's window check, in a bundle
        from gambit.qt.window_probe import child_main as window_child_main

        return window_child_main()
    if "--self-test" in args_in:
        from gambit.cli.selftest import main as selftest_main
        from gambit.logs import install_crash_handler

        install_crash_handler()
        rest = [a for a in args_in if a != "--self-test"]
        return selftest_main(rest, started_at=_T_START, ui_check=_import_ui)

    parser = argparse.ArgumentParser(
        prog="gambit",
        description="Gambit desktop chat. Other arguments are passed on to Qt.",
        epilog="gambit --self-test --help lists the self-test's options.",
    )
    parser.add_argument("--version", action="version", version=f"gambit {__version__}")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="check the installation (model, backend, speculation) and exit 0/1",
    )
    parser.add_argument("--about", action="store_true", help="print version and backend, exit")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log everything, llama.cpp included"
    )
    args, qt_args = parser.parse_known_args(args_in)

    from gambit.logs import install_crash_handler, setup_logging

    setup_logging(args.verbose)
    install_crash_handler()
    if args.about:
        from gambit.cli.selftest import about_main

        return about_main()
    return _run_gui(qt_args)


def _run_gui(qt_args: list[str]) -> int:
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from gambit.logs import set_crash_notifier
    from gambit.qt import compat
    from gambit.storage.chat_store.conversations import default_store_path
    from gambit.storage.chat_store.recovery import open_history
    from gambit.storage.settings import SettingsStore
    from gambit.ui.window.main_window import MainWindow

    # PySide6 6.12.0 loses a reference to None or True on most calls: repair that
    # before any other thread starts (a no-op on a binding without the bug).
    compat.install()
    app = QApplication([sys.argv[0], *qt_args])
    app.setApplicationName("Gambit")
    app.setApplicationDisplayName("Gambit")
    app.setApplicationVersion(__version__)
    app.setDesktopFileName("gambit")  # matches gambit.desktop (Wayland window icons)
    app.setStyle("Fusion")
    icon = QIcon()
    for path in icon_files():
        icon.addFile(str(path))
    if not icon.isNull():
        app.setWindowIcon(icon)
    set_crash_notifier(_show_crash_box)

    # A damaged, locked or unwritable history never stops the start: see recovery.py.
    history = open_history(default_store_path())
    window = MainWindow(SettingsStore(), history.store, history_notice=history.notice)
    window.show()
    window.load_engine()
    code = app.exec()
    # Whatever ended the event loop, the window's closing saves the streaming
    # reply and stops the engine thread (a no-op when it was closed already).
    window.close()
    if window.worker_thread.thread.isRunning():
        # The engine is inside a native call that cannot be interrupted (a
        # model load, a decode) and did not return within the close timeout.
        # The reply and the history were saved and closed by closeEvent;
        # letting Python tear down a running QThread would abort the process
        # ("QThread: Destroyed while thread is still running"), so end it here.
        import logging
        import os

        logging.getLogger(__name__).warning(
            "the engine thread did not stop in time; ending the process (all was saved)"
        )
        logging.shutdown()
        os._exit(code)
    # Delete the window here, children with their parents, while Qt and Python
    # are whole: what Python still owns at interpreter exit PySide deletes in no
    # set order, and one deletion there can release another's owner.
    window.deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
