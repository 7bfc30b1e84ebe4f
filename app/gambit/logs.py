"""Where Gambit writes what happened: a rotating log file and crash reports.

- ``setup_logging`` sends every ``gambit.*`` logger, llama.cpp's own log
  included (the runtime routes it to the ``gambit.llama`` logger), to
  ``log_dir()/gambit.log``, rotated at 2 MB with five old files kept. The
  console (when there is one) shows warnings only, or everything with
  ``verbose``.
- ``install_crash_handler`` turns an uncaught exception, in any thread, into a
  report file under ``log_dir()/crashes/`` (traceback, versions, platform,
  backend) that the user can attach to a bug report, and tells them where it
  is (stderr, the log, and a message box in the GUI). Native crashes
  (segfaults inside llama.cpp or Qt) are caught by ``faulthandler``, which
  writes its tracebacks to ``log_dir()/crashes/native.log``.

Logs and reports quote the user's chats and paths, so their folders and files
are private (0700 and 0600), rotated log files included.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import faulthandler
import io
import logging
import logging.handlers
import os
import platform
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from gambit import __version__
from gambit.fsutil import make_private_dirs
from gambit.storage.files import touch_private
from gambit.storage.paths import log_dir

LOG_FILE = "gambit.log"
MAX_BYTES = 2 * 1024 * 1024
BACKUP_COUNT = 5
CRASH_DIR = "crashes"
NATIVE_CRASH_FILE = "native.log"

_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"
_CONSOLE_FORMAT = "%(levelname)s %(name)s: %(message)s"
_HANDLER_TAG = "_gambit_handler"

log = logging.getLogger("gambit")

# Called with the report's path after a crash report was written (the GUI
# shows a message box); set by ``install_crash_handler``.
CrashNotifier = Callable[[Path, str], None]

_state: dict[str, object] = {}


class _QuietLlama(logging.Filter):
    """Keeps llama.cpp's chatter off the console unless it is an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("gambit.llama") or record.levelno >= logging.ERROR


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Opens each log file (the first, and each one after a rotation) as 0600."""

    def _open(self) -> io.TextIOWrapper:
        touch_private(Path(self.baseFilename))
        return super()._open()


def log_file_path() -> Path:
    return log_dir() / LOG_FILE


def setup_logging(verbose: bool = False, *, console: bool = True) -> Path | None:
    """Configure logging for the app; returns the log file, or None when the
    log folder cannot be written (then logging goes to the console only).

    Safe to call more than once: handlers installed earlier are replaced.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_TAG, False):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # llama.cpp logs model loading at INFO: useful in a bug report, so the file keeps it.
    logging.getLogger("gambit.llama").setLevel(logging.DEBUG if verbose else logging.INFO)

    path: Path | None = log_file_path()
    file_error: OSError | None = None
    try:
        assert path is not None
        make_private_dirs(path.parent)
        file_handler = _PrivateRotatingFileHandler(
            path, maxBytes=MAX_BYTES, backupCount=BACKUP_COUNT, encoding="utf-8"
        )
    except OSError as exc:
        file_error, path = exc, None
    else:
        file_handler.setLevel(logging.DEBUG if verbose else logging.INFO)
        file_handler.setFormatter(logging.Formatter(_FORMAT))
        _tag(file_handler)
        root.addHandler(file_handler)

    # A windowed app (Windows, macOS .app) may have no stderr at all.
    stream = sys.stderr
    if console and stream is not None:
        console_handler = logging.StreamHandler(stream)
        console_handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
        console_handler.setFormatter(logging.Formatter(_CONSOLE_FORMAT))
        if not verbose:
            console_handler.addFilter(_QuietLlama())
        _tag(console_handler)
        root.addHandler(console_handler)

    # Python warnings (e.g. deprecations in dependencies) belong in the log too.
    logging.captureWarnings(True)
    if file_error is not None:
        log.warning("cannot write the log file (%s); logging to the console only", file_error)
    else:
        log.info(
            "Gambit %s starting (Python %s, %s); log file %s",
            __version__,
            platform.python_version(),
            platform.platform(),
            path,
        )
    return path


def _tag(handler: logging.Handler) -> None:
    setattr(handler, _HANDLER_TAG, True)


# ------------------------------------------------------------------ crash reports
def crash_dir() -> Path:
    return log_dir() / CRASH_DIR


def environment_lines() -> list[str]:
    """Versions and platform, for crash reports and ``--about``. Never raises."""
    lines = [
        f"Gambit {__version__}",
        f"Python {platform.python_version()} ({platform.python_implementation()})",
        f"Platform {platform.platform()} ({platform.machine()})",
        f"Frozen bundle: {'yes' if getattr(sys, 'frozen', False) else 'no'}",
    ]
    try:
        from importlib.metadata import version

        lines.append(f"llama-cpp-python {version('llama-cpp-python')}")
    except Exception as exc:  # metadata can be missing in a bundle
        lines.append(f"llama-cpp-python version unknown ({type(exc).__name__})")
    try:
        # Imported in the report, not at the top: logging is set up before
        # anything loads llama.cpp, and a report must not fail on a broken one.
        from gambit.engine.machine.backend import detect_backend

        backend = detect_backend()
        lines.append(f"Backend: {backend.summary}")
        lines.append(f"llama.cpp: {backend.system_info}")
    except Exception as exc:  # a crash report must not fail on the backend
        lines.append(f"Backend: unknown ({type(exc).__name__}: {exc})")
    return lines


def write_crash_report(
    exc_type: type[BaseException],
    exc: BaseException,
    tb: TracebackType | None,
    *,
    thread: str | None = None,
) -> Path | None:
    """Write a crash report; returns its path, or None if it could not be written."""
    now = dt.datetime.now()
    body = [
        f"Gambit crash report, {now.isoformat(timespec='seconds')}",
        f"Thread: {thread or threading.current_thread().name}",
        "",
        *environment_lines(),
        f"Command line: {sys.argv!r}",
        "",
        "".join(traceback.format_exception(exc_type, exc, tb)).rstrip(),
        "",
    ]
    folder = crash_dir()
    try:
        make_private_dirs(folder)
        stem = f"crash-{now:%Y%m%d-%H%M%S}"
        path = folder / f"{stem}.txt"
        n = 1
        while path.exists():  # two crashes in one second
            path = folder / f"{stem}-{n}.txt"
            n += 1
        touch_private(path)
        path.write_text("\n".join(body), encoding="utf-8")
    except OSError:
        log.exception("could not write a crash report into %s", folder)
        return None
    return path


def _report(
    exc_type: type[BaseException],
    exc: BaseException,
    tb: TracebackType | None,
    thread: str | None,
) -> None:
    path = write_crash_report(exc_type, exc, tb, thread=thread)
    log.critical(
        "uncaught %s in thread %s; crash report: %s",
        exc_type.__name__,
        thread or threading.current_thread().name,
        path,
        exc_info=(exc_type, exc, tb),
    )
    stream = sys.stderr
    if stream is not None:
        with contextlib.suppress(Exception):
            where = f"; a report was written to {path}" if path else ""
            print(f"Gambit crashed: {exc_type.__name__}: {exc}{where}", file=stream, flush=True)
    notify = _state.get("notify")
    if path is not None and callable(notify):
        try:
            notify(path, f"{exc_type.__name__}: {exc}")
        except Exception:
            log.exception("could not show the crash message")


def _excepthook(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    _report(exc_type, exc, tb, threading.current_thread().name)


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    name = args.thread.name if args.thread is not None else None
    _report(args.exc_type, args.exc_value, args.exc_traceback, name)


def install_crash_handler(notify: CrashNotifier | None = None) -> Path | None:
    """Report uncaught exceptions (all threads) and native crashes.

    ``notify(report_path, summary)`` is called after a report was written, e.g.
    to show a message box. Returns the file faulthandler writes native crash
    tracebacks into (None if it could not be opened).
    """
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    _state["notify"] = notify
    return _enable_faulthandler()


def set_crash_notifier(notify: CrashNotifier | None) -> None:
    _state["notify"] = notify


def _enable_faulthandler() -> Path | None:
    old = _state.get("fault_file")
    if old is not None:
        return Path(getattr(old, "name", ""))
    path = crash_dir() / NATIVE_CRASH_FILE
    try:
        make_private_dirs(path.parent)
        touch_private(path)
        # Start afresh once it grows past the log's rotation size.
        mode = "w" if path.is_file() and path.stat().st_size > MAX_BYTES else "a"
        # Kept open for the life of the process: faulthandler writes to its fd.
        fault_file: IO[str] = open(path, mode, encoding="utf-8")  # noqa: SIM115
        fault_file.write(f"--- Gambit {__version__} started, pid {os.getpid()} ---\n")
        fault_file.flush()
    except OSError as exc:
        log.warning("cannot open %s for native crash tracebacks: %s", path, exc)
        return None
    faulthandler.enable(file=fault_file, all_threads=True)
    _state["fault_file"] = fault_file
    return path
