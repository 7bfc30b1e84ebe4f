"""Can this machine open Gambit's window? Asked in a child process.

Listing Qt's platform plugins proves little: on a fresh Linux desktop the xcb
plugin is there but cannot load when system libraries are missing, and Qt then
aborts the whole process. So ``gambit --self-test`` starts a child that creates
a ``QApplication`` on the platform plugin in use, shows a widget and processes
its events once; the parent reads how the child ended and, when the xcb plugin
failed, names the missing libraries and the Debian/Ubuntu packages that hold
them (the same table as ``packaging/linux/deb_depends.sh`` and the README).

With no display at all (a server, CI) the child opens the window on the
offscreen plugin instead, which still proves the widgets work, and says so.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CHILD_FLAG: Final = "--gambit-window-probe"
OK_PREFIX: Final = "window ok on "
TIMEOUT_S: Final = 60.0

# Libraries Qt's xcb platform plugin loads that a fresh system may lack -> package.
XCB_PACKAGES: Final[dict[str, str]] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class WindowCheck:
    platform: str  # the plugin tried ("xcb", "offscreen", "" when Qt chooses)
    ok: bool
    detail: str  # what happened, one line: shown on the self-test's "qt" line


def platform_in_use(env: Mapping[str, str]) -> str | None:
    """The platform plugin a window would use: ``QT_QPA_PLATFORM``, else "" (Qt's
    own choice); None on Linux with no display to show a window on."""
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen
    if sys.platform.startswith("linux") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return None
    return ""


def child_command() -> list[str]:
    """The command that runs ``child_main`` (a frozen bundle starts itself)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, CHILD_FLAG]
    return [sys.executable, "-I", "-m", "gambit.qt.window_probe"]


def child_main() -> int:
    """In the child: open a small window, process its events once, say how it went."""
    from PySide6.QtWidgets import QApplication, QLabel

    app = QApplication([sys.argv[0]])
    window = QLabel("Gambit self-test")
    window.resize(240, 80)
    window.show()
    app.processEvents()
    shown = window.isVisible() and window.windowHandle() is not None
    window.close()
    app.processEvents()
    if not shown:
        print(f"no window shown on {app.platformName()}", flush=True)
        return 1
    print(f"{OK_PREFIX}{app.platformName()}", flush=True)
    return 0


def missing_libraries(plugin: Path) -> list[str]:
    """Shared libraries ``plugin`` links to that the system lacks (Linux, ldd)."""
    ldd = shutil.which("ldd")
    if ldd is None or not plugin.is_file():
        return []
    try:
        proc = subprocess.run(
            [ldd, str(plugin)], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(set(_NOT_FOUND.findall(proc.stdout)))


def packages_for(libraries: list[str]) -> str:
    """``"install libxcb-icccm4 libxcb-keysyms1"``; unknown libraries are named as such."""
    packages = [XCB_PACKAGES[lib] for lib in libraries if lib in XCB_PACKAGES]
    unknown = [lib for lib in libraries if lib not in XCB_PACKAGES]
    parts = []
    if packages:
        parts.append("install " + " ".join(packages) + " (Debian/Ubuntu package names)")
    if unknown:
        parts.append("also missing: " + " ".join(unknown))
    return "; ".join(parts)


def _xcb_plugin() -> Path:
    from PySide6.QtCore import QLibraryInfo

    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    return plugins / "platforms" / "libqxcb.so"


def _ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"the process ended on {signal.Signals(-returncode).name}"
        except ValueError:
            return f"the process ended by signal {-returncode}"
    return f"exit status {returncode}"


def _qt_said(output: str) -> str:
    """The most telling line of what Qt printed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "the Qt platform plugin" in line or "could not connect" in line:
            return line
    return lines[-1] if lines else ""


def check_window(env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S) -> WindowCheck:
    """Open a window in a child process on the platform plugin in use."""
    env = dict(os.environ if env is None else env)
    platform = platform_in_use(env)
    headless = platform is None
    if headless:
        env["QT_QPA_PLATFORM"] = "offscreen"
    try:
        proc = subprocess.run(
            child_command(),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return WindowCheck(platform or "", False, f"opening a window hung for {timeout:.0f} s")
    except OSError as exc:
        return WindowCheck(platform or "", False, f"could not start the window check: {exc}")
    said = [line for line in proc.stdout.splitlines() if line.startswith(OK_PREFIX)]
    if proc.returncode == 0 and said:
        shown_on = said[-1].removeprefix(OK_PREFIX)
        if headless:
            note = "no display (DISPLAY and WAYLAND_DISPLAY unset): a window opened offscreen"
            missing = missing_libraries(_xcb_plugin()) if sys.platform.startswith("linux") else []
            if missing:
                note += f"; a desktop session would need: {packages_for(missing)}"
            return WindowCheck("offscreen", True, note)
        return WindowCheck(shown_on, True, f"a window opened on {shown_on}")

    tried = platform or "Qt's default platform"
    parts = [f"no window could be opened on {tried} ({_ended(proc.returncode)})"]
    qt_line = _qt_said(proc.stderr + proc.stdout)
    if qt_line:
        parts.append(f"Qt said: {qt_line}")
    if sys.platform.startswith("linux") and platform in ("", "xcb"):
        missing = missing_libraries(_xcb_plugin())
        if missing:
            parts.append(f"missing {' '.join(missing)}: {packages_for(missing)}")
    return WindowCheck(platform or "", False, "; ".join(parts))


if __name__ == "__main__":
    raise SystemExit(child_main())
