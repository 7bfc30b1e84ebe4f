"""The folders Gambit uses, per platform conventions (platformdirs).

``GAMBIT_HOME`` moves them all under one folder (tests, portable installs).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Gambit"


def _home() -> Path | None:
    home = os.environ.get("GAMBIT_HOME")
    return Path(home) if home else None


def data_dir() -> Path:
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    return data_dir() / "models"


def library_index() -> Path:
    """The model library's index (gambit.models.library)."""
    return data_dir() / "library.json"


def config_dir() -> Path:
    home = _home()
    return (
        home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
    )


def log_dir() -> Path:
    home = _home()
    return home / "logs" if home else Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Measurements worth keeping but safe to lose (kernel probe verdicts).

    ``GAMBIT_CACHE`` moves it alone (the tests share one across data folders).
    """
    own = os.environ.get("GAMBIT_CACHE")
    if own:
        return Path(own)
    home = _home()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def docs_dir() -> Path | None:
    """The folder holding ``README.md`` and ``docs/``, the documentation shipped
    with the app: the package's (wheel, frozen bundle) or the source tree's."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package, package.parents[1]):
        if (candidate / "README.md").is_file() and (candidate / "docs").is_dir():
            return candidate
    return None


def resources_dir() -> Path | None:
    """The ``resources/`` folder: inside the package (wheel, frozen bundle) or the source tree."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "resources", package.parents[1] / "resources"):
        if candidate.is_dir():
            return candidate
    return None
