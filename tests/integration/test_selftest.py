"""``gambit --self-test``, logging and crash reports, run as a user would: subprocesses.

The self-test is what an installed bundle runs to prove it works, so it is
tested end to end on the real model, with no display (it must not need one).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gambit.engine.machine import rpc
from gambit.models.default_model import DEFAULT_MODEL_FILE, bundled_model_path, default_model_path

# One thread: the machine's two cores are shared with other jobs.
SELFTEST = ["-m", "gambit.cli.selftest"]
FAST = ["--threads", "1", "--tokens", "16"]


def _env(home: Path, *, display: bool = False) -> dict[str, str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    if not display:  # as on a server or in CI: no display, and no Qt platform chosen
        for key in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
            env.pop(key, None)
    return env


def _run(args: list[str], home: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=timeout,
        check=False,
    )


def _lines(out: str) -> dict[str, str]:
    pairs = (line.partition(": ") for line in out.splitlines())
    return {key: value for key, sep, value in pairs if sep}


def test_selftest_passes_on_the_real_model(smol_q4_1: Path, tmp_path: Path) -> None:
    proc = _run([*SELFTEST, "--target", str(smol_q4_1), *FAST, "--no-qt"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = _lines(proc.stdout)
    assert info["result"] == "PASS"
    assert info["gambit"] == "0.1.0"
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["llama-cpp-python"])
    assert "threads" in info["backend"]
    assert info["system info"].startswith("CPU :") or "=" in info["system info"]
    assert info["gpu layers"] in {"0", "all"}
    # This installation's llama.cpp is built with GGML_RPC (the README's command).
    assert rpc.supported()
    assert info["rpc workers"].startswith("yes (llama.cpp has the RPC backend")
    assert re.fullmatch(r"\d+\.\d\d s", info["load time"])
    cold = re.match(r"(\d+\.\d\d) s \(process start", info["cold start to first token"])
    assert cold is not None and 0 < float(cold.group(1)) < 120
    plain = re.match(r"(\d+) tokens, ([\d.]+) tok/s, ttft \d+ ms", info["run target only"])
    assert plain is not None and int(plain.group(1)) == 16 and float(plain.group(2)) > 0
    lookup = info["run prompt lookup"]
    assert re.search(r"accepted \d+/\d+ \(\d+%\), speedup \d+\.\d\dx$", lookup), lookup
    assert info["check prompt lookup"] == "identical to target only (16 tokens)"
    # Token trees (a multi-sequence, unified KV cache) decode exactly too.
    assert re.search(r"accepted \d+/\d+ \(\d+%\)", info["run prompt lookup tree"])
    assert info["check prompt lookup tree"] == "identical to target only (16 tokens)"
    # The report is also saved where the user (or CI on Windows) can read it.
    saved = tmp_path / "logs" / "selftest.txt"
    assert info["report"] == str(saved)
    assert "result: PASS" in saved.read_text()


def test_selftest_with_a_draft_model(smol_q8_0: Path, smol_q4_1: Path, tmp_path: Path) -> None:
    args = ["--target", str(smol_q8_0), "--draft", str(smol_q4_1), *FAST, "--no-qt"]
    proc = _run([*SELFTEST, *args], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = _lines(proc.stdout)
    assert info["check draft model"] == "identical to target only (16 tokens)"
    assert re.search(r"accepted \d+/\d+", info["run draft model"])
    assert info["result"] == "PASS"


def test_app_entry_self_test_needs_no_display(smol_q4_1: Path, tmp_path: Path) -> None:
    """``gambit --self-test`` goes through the app's entry point, imports Qt and
    the whole UI, yet creates no widget: with no display and no Qt platform
    set, a QApplication would abort the process."""
    proc = _run(["-m", "gambit.ui.app", "--self-test", "--target", str(smol_q4_1), *FAST], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = _lines(proc.stdout)
    assert info["result"] == "PASS"
    assert "QtWidgets + QtCharts + Gambit's UI ok" in info["qt"]  # the window's check
    assert "offscreen" in info["qt"]
    # A window was really opened, in a child process, on the plugin Qt has without a display.
    assert "no display (DISPLAY and WAYLAND_DISPLAY unset): a window opened offscreen" in info["qt"]


def test_selftest_fails_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    proc = _run([*SELFTEST, "--target", str(missing), "--no-qt"], tmp_path)
    assert proc.returncode == 1
    result = _lines(proc.stdout)["result"]
    assert result.startswith("FAIL: ModelNotFoundError")
    assert str(missing) in result


def test_about_prints_version_and_backend(tmp_path: Path) -> None:
    proc = _run(["-m", "gambit.ui.app", "--about"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = _lines(proc.stdout)
    assert info["gambit"] == "0.1.0"
    assert info["gpu offload"] in {"yes", "no"}
    assert info["rpc workers"].startswith("yes" if rpc.supported() else "no")
    assert "llama-cpp-python" in info
    assert info["log folder"] == str(tmp_path / "logs")


def test_a_frozen_app_uses_the_model_it_carries(
    smol_q4_1: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed bundle cannot run pip: the model comes from the bundle."""
    bundle = tmp_path / "bundle"
    (bundle / "models").mkdir(parents=True)
    (bundle / "models" / DEFAULT_MODEL_FILE).symlink_to(smol_q4_1)
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path / "home"))
    assert bundled_model_path() is None  # not frozen: nothing to look for
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    assert bundled_model_path() == bundle / "models" / DEFAULT_MODEL_FILE
    assert default_model_path() == bundle / "models" / DEFAULT_MODEL_FILE
    assert not (tmp_path / "home").exists()  # nothing was provisioned
    # An explicit folder still means that folder (the test fixtures rely on it).
    assert default_model_path(smol_q4_1.parent) == smol_q4_1


# ------------------------------------------------------------------ logging
LOGGING_SCRIPT = """
import logging, sys
import gambit.logs as logs
logs.MAX_BYTES = 2000  # rotate quickly
path = logs.setup_logging(verbose=False)
print(path)
logging.getLogger("gambit.llama").info("llama says hello")
logging.getLogger("gambit.llama").debug("llama debug chatter")
logging.getLogger("gambit.engine").info("engine info line")
logging.getLogger("gambit.engine").warning("engine warning line")
for i in range(60):
    logging.getLogger("gambit.filler").info("filler line %d %s", i, "x" * 40)
"""


def test_logging_writes_to_the_log_folder_and_rotates(tmp_path: Path) -> None:
    proc = _run(["-c", LOGGING_SCRIPT], tmp_path)
    assert proc.returncode == 0, proc.stderr
    log_file = tmp_path / "logs" / "gambit.log"
    assert proc.stdout.strip() == str(log_file)
    rotated = sorted((tmp_path / "logs").glob("gambit.log.*"))
    assert 1 <= len(rotated) <= 5  # 2 kB files, five kept
    text = "".join(p.read_text() for p in [log_file, *rotated])
    assert "INFO    MainThread gambit.llama: llama says hello" in text  # llama.cpp's log, at INFO
    assert "llama debug chatter" not in text
    assert "engine info line" in text
    assert "filler line 59" in log_file.read_text()
    # The console shows warnings only, and never llama.cpp's chatter.
    assert "engine warning line" in proc.stderr
    assert "llama says hello" not in proc.stderr
    assert "engine info line" not in proc.stderr


# ------------------------------------------------------------------ crash reports
CRASH_SCRIPT = """
import sys, threading
from gambit.logs import install_crash_handler, setup_logging
setup_logging()
native = install_crash_handler()
print("native:", native, flush=True)
def worker():
    raise ValueError("worker thread went wrong")
t = threading.Thread(target=worker, name="engine-worker")
t.start()
t.join()
raise RuntimeError("boom from the main thread")
"""


def test_crash_handler_writes_reports(tmp_path: Path) -> None:
    proc = _run(["-c", CRASH_SCRIPT], tmp_path)
    assert proc.returncode == 1
    crashes = tmp_path / "logs" / "crashes"
    assert f"native: {crashes / 'native.log'}" in proc.stdout
    assert (crashes / "native.log").is_file()  # faulthandler's file, for native crashes
    reports = sorted(crashes.glob("crash-*.txt"))
    assert len(reports) == 2, proc.stderr
    for report in reports:
        assert re.fullmatch(r"crash-\d{8}-\d{6}(-\d+)?\.txt", report.name)
    texts = [r.read_text() for r in reports]
    worker = next(t for t in texts if "worker thread went wrong" in t)
    main = next(t for t in texts if "boom from the main thread" in t)
    assert "Thread: engine-worker" in worker
    assert "Thread: MainThread" in main
    for text in texts:
        assert "Traceback (most recent call last)" in text
        assert "Gambit 0.1.0" in text
        assert "Platform " in text
        assert "Backend: " in text
    # The user is told where the report is, and the log has it too.
    assert "Gambit crashed: RuntimeError: boom from the main thread" in proc.stderr
    assert str(crashes) in proc.stderr
    log_text = (tmp_path / "logs" / "gambit.log").read_text()
    assert "uncaught RuntimeError in thread MainThread" in log_text


NATIVE_CRASH_SCRIPT = """
import ctypes
from gambit.logs import install_crash_handler
install_crash_handler()
ctypes.string_at(0)  # a segfault, as a crash inside llama.cpp or Qt would be
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signal semantics")
def test_native_crash_leaves_a_traceback(tmp_path: Path) -> None:
    proc = _run(["-c", textwrap.dedent(NATIVE_CRASH_SCRIPT)], tmp_path)
    assert proc.returncode != 0
    text = (tmp_path / "logs" / "crashes" / "native.log").read_text()
    assert "Fatal Python error: Segmentation fault" in text
    assert "string_at" in text or "<string>" in text


def test_selftest_reports_a_damaged_settings_file(smol_q4_1: Path, tmp_path: Path) -> None:
    settings = tmp_path / "config" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"threads": 2, ', encoding="utf-8")  # cut short
    proc = _run([*SELFTEST, "--target", str(smol_q4_1), *FAST, "--no-qt"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    info = _lines(proc.stdout)
    assert info["settings"].startswith("PROBLEM:") and "set it aside" in info["settings"]
    assert info["result"].startswith("FAIL") and "settings:" in info["result"]
    assert info["history"].endswith("(not created yet)")
