"""``gambit --self-test``'s window check: a child process opens a real window on
the platform plugin in use and the parent says what failed, naming packages."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gambit.qt import window_probe
from gambit.qt.window_probe import check_window, missing_libraries, packages_for, platform_in_use


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    env.update(changes)
    return env


def test_the_platform_in_use() -> None:
    assert platform_in_use({"QT_QPA_PLATFORM": "wayland"}) == "wayland"
    assert platform_in_use({"DISPLAY": ":0"}) == ""  # Qt chooses
    assert platform_in_use({}) is None  # no display at all (Linux)


def test_a_window_opens_on_the_chosen_plugin() -> None:
    check = check_window(_env(QT_QPA_PLATFORM="offscreen"))
    assert check.ok, check.detail
    assert check.detail == "a window opened on offscreen"


def test_without_a_display_the_window_opens_offscreen_and_says_so() -> None:
    check = check_window(_env())
    assert check.ok, check.detail
    assert check.detail.startswith("no display (DISPLAY and WAYLAND_DISPLAY unset)")


def test_a_window_that_cannot_open_is_reported_with_what_qt_said() -> None:
    # xcb with a display nobody serves: Qt aborts the child, the parent explains.
    check = check_window(_env(QT_QPA_PLATFORM="xcb", DISPLAY=":93"), timeout=60)
    assert not check.ok
    assert check.detail.startswith("no window could be opened on xcb (")
    assert "Qt said:" in check.detail


def _fake_ldd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ldd = tmp_path / "bin" / "ldd"
    ldd.parent.mkdir()
    ldd.write_text(
        "#!/bin/sh\n"
        "echo '\tlibxcb.so.1 => /usr/lib/libxcb.so.1 (0x0001)'\n"
        "echo '\tlibxcb-icccm.so.4 => not found'\n"
        "echo '\tlibxcb-keysyms.so.1 => not found'\n"
        "echo '\tlibfoo.so.7 => not found'\n"
    )
    ldd.chmod(ldd.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{ldd.parent}{os.pathsep}{os.environ['PATH']}")


def test_missing_xcb_libraries_are_named_with_their_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_ldd(tmp_path, monkeypatch)
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"\x7fELF")
    missing = missing_libraries(plugin)
    assert missing == ["libfoo.so.7", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert packages_for(missing) == (
        "install libxcb-icccm4 libxcb-keysyms1 (Debian/Ubuntu package names); "
        "also missing: libfoo.so.7"
    )


def test_a_failed_xcb_window_names_the_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_ldd(tmp_path, monkeypatch)
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"\x7fELF")
    monkeypatch.setattr(window_probe, "_xcb_plugin", lambda: plugin)
    check = check_window(_env(QT_QPA_PLATFORM="xcb", DISPLAY=":93"), timeout=60)
    assert not check.ok
    assert "install libxcb-icccm4 libxcb-keysyms1" in check.detail


def test_packages_match_the_packaging_script() -> None:
    script = Path(__file__).parents[2] / "packaging" / "linux" / "deb_depends.sh"
    text = script.read_text(encoding="utf-8")
    for library, package in window_probe.XCB_PACKAGES.items():
        assert f"[{library}]={package}" in text
