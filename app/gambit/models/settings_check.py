"""Whether the model files that settings name can be loaded, checked from their
GGUF headers before the settings are saved and before the running model is
unloaded (``Settings.validate()`` only checks that the files exist)."""

from __future__ import annotations

from pathlib import Path

from gambit.errors import ModelFileError
from gambit.formats.gguf_file import check_model_file
from gambit.storage.settings import LABELS, Settings


def model_file_problems(settings: Settings, missing: bool = True) -> dict[str, str]:
    """Setting name -> why its model file cannot be used, as a sentence that starts
    with the setting's label; {} when every named file is a complete GGUF model.

    ``missing`` False leaves out files that are not there at all, for callers
    that already report them through ``Settings.validate()``.
    """
    files: list[tuple[str, Path | None]] = [
        ("target_model", settings.target_path()),
        ("draft_model", settings.draft_path()),
    ]
    problems: dict[str, str] = {}
    for name, path in files:
        if path is None or (not missing and not path.is_file()):
            continue
        try:
            check_model_file(path)
        except ModelFileError as exc:
            problems[name] = f"{LABELS[name]}: {exc}"
        except OSError as exc:  # what the header reader met on the way (a read error)
            problems[name] = f"{LABELS[name]}: the file cannot be read ({exc}): {path}"
    return problems
