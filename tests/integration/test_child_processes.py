"""Child processes run exactly the tool meant: a hostile ``pip/`` or ``gambit/``
folder in the working directory is never executed, a frozen bundle starts
itself, and the quantizer child does not outlive a killed parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gambit.formats.gguf_file import check_model_file
from gambit.models.child_process import module_command
from gambit.models.derive import _partial_path, derive_draft


def _hostile_folder(root: Path) -> Path:
    """A working directory whose ``pip`` and ``gambit`` packages leave a mark when run."""
    marker = root / "HOSTILE-CODE-RAN"
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for package in ("pip", "gambit", "gambit/models"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text(code)
    (root / "pip" / "__main__.py").write_text(code)
    (root / "gambit" / "models" / "derive.py").write_text(code)
    return marker


def test_hostile_pip_in_the_working_directory_is_not_run(tmp_path: Path) -> None:
    marker = _hostile_folder(tmp_path)
    # What the fetch used to do runs the folder's pip:
    subprocess.run([sys.executable, "-m", "pip", "--version"], cwd=tmp_path, check=False)
    assert marker.exists()
    marker.unlink()
    # What it does now runs the installed pip.
    proc = subprocess.run(
        [*module_command("pip"), "--version"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("pip ")
    assert not marker.exists()


def test_derive_in_a_hostile_working_directory(
    tmp_path: Path, smol_q4_1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile = tmp_path / "cwd"
    marker = _hostile_folder(hostile)
    monkeypatch.chdir(hostile)
    dest = derive_draft(smol_q4_1, "Q8_0", tmp_path / "out" / "draft.gguf", register=False)
    check_model_file(dest)  # a real model came out
    assert not marker.exists()


def test_frozen_bundle_starts_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert module_command("pip") == [sys.executable, "--gambit-pip"]
    assert module_command("gambit.models.derive") == [sys.executable, "--gambit-derive"]


def test_bundle_flags_reach_the_tools(capsys: pytest.CaptureFixture[str]) -> None:
    from gambit.ui.app import main

    assert main(["--gambit-derive"]) == 2  # the derive child's own usage line
    assert "usage: python -m gambit.models.derive" in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_quantizer_child_ends_with_a_killed_parent(tmp_path: Path, smol_q8_0: Path) -> None:
    dest = tmp_path / "big.gguf"
    # Q3_K_M: quantizing takes long enough (~1.5 s on an AVX-512 Xeon) that the
    # parent dies mid-write; writing F32 took 0.7 s in all there, and the child
    # finished before it noticed (it looks every PARENT_POLL_S).
    parent_code = textwrap.dedent(f"""
        from gambit.models.derive import derive_draft
        derive_draft({str(smol_q8_0)!r}, "Q3_K_M", {str(dest)!r}, register=False)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    partial = _partial_path(dest)
    try:
        deadline = time.monotonic() + 120
        while not (partial.exists() and partial.stat().st_size > 0):
            assert time.monotonic() < deadline, "the quantizer never started writing"
            assert parent.poll() is None
            time.sleep(0.05)
        children_file = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
        (child,) = map(int, children_file.read_text().split())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and _state(child) != "Z":
            assert time.monotonic() < deadline, "the quantizer outlived its parent"
            time.sleep(0.1)
        deadline = time.monotonic() + 5
        while partial.exists():  # (removed by the child as it ends)
            assert time.monotonic() < deadline, "the partial file was left behind"
            time.sleep(0.1)
        assert not dest.exists()
    finally:
        parent.kill()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return "Z"
