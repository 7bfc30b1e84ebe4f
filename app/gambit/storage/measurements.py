"""Measurements on the user's chats, kept as JSON files in the data folder.

One file per measurement (``measurements/measure-<time>.json``, written
atomically), listed newest first; each holds the whole report of
``gambit.measure`` (machine, models, settings, results), so that an earlier
one reads back exactly as it was shown. Applying a recommendation turns it
into settings here, below the UI, through ``Settings.with_`` and ``validate``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gambit.engine.drafters.registry import DRAFTERS
from gambit.errors import GambitError
from gambit.fsutil import write_atomic
from gambit.storage import paths
from gambit.storage.settings import Settings
from gambit.words import counted

log = logging.getLogger(__name__)

PREFIX = "measure-"


class MeasurementFileError(GambitError):
    """A measurement cannot be saved or read back."""


@dataclass(frozen=True)
class SavedMeasurement:
    """One measurement on disk, as the list of earlier ones shows it."""

    path: Path
    started: str
    target: str
    headline: str
    turns: int

    @property
    def title(self) -> str:
        when = self.started.replace("T", " ")[:16]
        return f"{when} · {counted(self.turns, 'turn')}"


def measurements_dir() -> Path:
    return paths.data_dir() / "measurements"


def save(report: Mapping[str, Any], folder: Path | None = None) -> Path:
    """Write ``report``; returns its file. The name sorts by time (to the millisecond)."""
    folder = folder or measurements_dir()
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    path = folder / f"{PREFIX}{stamp}.json"
    n = 1
    while path.exists():  # two in one millisecond
        n += 1
        path = folder / f"{PREFIX}{stamp}-{n}.json"
    try:
        write_atomic(path, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise MeasurementFileError(
            f"Could not save the measurement to {path}: {exc.strerror or exc}."
        ) from exc
    return path


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MeasurementFileError(f"Cannot read the measurement {path.name}: {exc}.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("suites"), dict):
        raise MeasurementFileError(f"{path.name} is not a Gambit measurement.")
    return cast(dict[str, Any], data)


def list_saved(folder: Path | None = None) -> list[SavedMeasurement]:
    """Every readable measurement, newest first (unreadable files are skipped)."""
    folder = folder or measurements_dir()
    try:
        files = sorted(folder.glob(f"{PREFIX}*.json"), key=_newness, reverse=True)
    except OSError:
        return []
    saved = []
    for path in files:
        try:
            report = load(path)
        except MeasurementFileError as exc:
            log.warning("%s", exc)
            continue
        saved.append(summary(report, path))
    return saved


def _newness(path: Path) -> tuple[str, int]:
    """Sort key: the time stamp, then the counter a second file in the same
    millisecond got ("-2", "-3"; plain string order would put "-2" first)."""
    stem = path.stem.removeprefix(PREFIX)
    base, _, counter = stem.rpartition("-")
    if base.count("-") == 2 and counter.isdigit():  # <date>-<time>-<ms>-<n>
        return base, int(counter)
    return stem, 1


def summary(report: Mapping[str, Any], path: Path) -> SavedMeasurement:
    rec = report.get("recommendation") or {}
    return SavedMeasurement(
        path=path,
        started=str(report.get("started", "")),
        target=Path(str(report.get("target", "?"))).name,
        headline=str(rec.get("headline", "")),
        turns=int(report.get("turns", 0)),
    )


def recommended_settings(settings: Settings, report: Mapping[str, Any]) -> Settings:
    """``settings`` with the measurement's recommendation applied: its drafter
    and policy, speculation on; or speculation off. Raises ``GambitError``
    when the result would not be valid (the problems, in words)."""
    rec = report.get("recommendation") or {}
    if rec.get("apply") is False:
        raise GambitError(f"There is nothing to apply: {rec.get('headline', 'no recommendation')}.")
    if rec.get("off", True):
        return settings.with_(speculation=False)
    changes: dict[str, Any] = {
        "speculation": True,
        "drafter": rec["drafter"],
        "policy": rec["policy"],
        "tree_drafts": bool(rec.get("tree")),
    }
    if rec["policy"] == "fixed" and rec.get("gamma"):
        changes["fixed_gamma"] = int(rec["gamma"])
        changes["gamma_max"] = max(settings.gamma_max, int(rec["gamma"]))
    chosen = rec["drafter"] in DRAFTERS and DRAFTERS[rec["drafter"]].file == "chosen"
    draft = rec.get("draft_model") or report.get("draft")  # a candidate, or the loaded one
    if chosen and draft:
        changes["draft_model"] = str(draft)
    new = settings.with_(**changes)
    problems = new.validate()
    if problems:
        raise GambitError("The recommendation cannot be applied: " + " ".join(problems))
    return new
