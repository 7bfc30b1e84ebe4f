"""How the dialog writes numbers, sizes and names (no Qt)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

MIB: Final = 1 << 20
GIB: Final = 1 << 30


def format_params(n: int) -> str:
    """A parameter count as people say it: "134.5 M", "7.62 B"."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.2f} B"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M"
    return f"{n / 1e3:.1f} K"


def format_bytes(n: float) -> str:
    """A size in binary units, as the memory estimates are given: "138.1 MiB"."""
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.0f} KiB"


def catalog_size(size_mb: int) -> str:
    """A catalog size (decimal megabytes, as Hugging Face shows it)."""
    return f"{size_mb / 1000:.2f} GB" if size_mb >= 1000 else f"{size_mb} MB"


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def display_name(path: Path) -> str:
    """A model's name in the table: its file name without ``.gguf`` (general.name
    is often the same for every quantization of a model)."""
    return path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.name


def html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
