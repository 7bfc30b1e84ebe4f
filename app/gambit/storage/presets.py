"""Presets: a named system prompt with its sampling, for chats that start from it.

The settings' own system prompt and sampling are the **Default** preset (edited
in Settings, as ever); other presets are kept in ``presets.json`` beside the
settings, each holding the values of ``PRESET_FIELDS`` and nothing else: what
a reply is sampled with, how long it may be, and whether it is drafted. Which
models load, and the drafter and policy, stay the machine's settings: changing
them loads the models again, which a preset must not do between two chats.

A new chat starts from a preset: it keeps the preset's name, and the preset's
system prompt is stored as the chat's first message (``system``), so that the
chat keeps it when the preset later changes, export and import carry it, and
prompt lookup's memory reads it like any other message. Its replies use the
preset's sampling while the preset exists (the settings' once it is deleted).

The file is read as the settings file is: a value of the wrong type is
dropped with a message, a damaged file is set aside, and writing replaces it
whole (``write_atomic``), so a crash leaves the old file or the new.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gambit.errors import GambitError
from gambit.fsutil import write_atomic
from gambit.storage import paths
from gambit.storage.files import set_aside
from gambit.storage.json_values import MISSING, coerce, expected, shown
from gambit.storage.settings import LABELS, Settings

log = logging.getLogger(__name__)

DEFAULT_PRESET: Final = "Default"  # the settings' own (never in the file)
PRESET_FIELDS: Final = (
    "system_prompt", "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed",
    "max_tokens", "speculation",
)  # fmt: skip
MAX_PRESETS: Final = 200
MAX_NAME_CHARS: Final = 80
_TYPES: Final = {name: typing.get_type_hints(Settings)[name] for name in PRESET_FIELDS}


class PresetError(GambitError):
    """The presets could not be saved."""


@dataclass(frozen=True)
class Preset:
    """A name and the values of ``PRESET_FIELDS`` it sets (the rest: the settings')."""

    name: str
    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, settings: Settings) -> Preset:
        """A preset holding ``settings``' values (a new one starts as Default is)."""
        return cls(name, {f: getattr(settings, f) for f in PRESET_FIELDS})

    def applied_to(self, settings: Settings) -> Settings:
        return settings.with_(**{k: v for k, v in self.values.items() if k in PRESET_FIELDS})

    @property
    def system_prompt(self) -> str:
        return str(self.values.get("system_prompt", ""))


def name_problem(name: str, others: Sequence[str]) -> str | None:
    """Why ``name`` cannot name a preset (beside ``others``), or None."""
    stripped = " ".join(name.split())
    if not stripped:
        return "A preset needs a name."
    if len(stripped) > MAX_NAME_CHARS:
        return f"A preset's name is at most {MAX_NAME_CHARS} characters."
    if stripped.casefold() == DEFAULT_PRESET.casefold():
        return f'"{DEFAULT_PRESET}" is the settings\' own preset; choose another name.'
    if stripped.casefold() in {o.casefold() for o in others}:
        return f'There is already a preset called "{stripped}".'
    return None


def preset_problems(preset: Preset, settings: Settings) -> list[str]:
    """What is wrong with the preset's values, as Settings says it ([] if nothing)."""
    labels = {LABELS[f] for f in PRESET_FIELDS}
    problems = preset.applied_to(settings).validate()
    return [p for p in problems if any(p.startswith(label) for label in labels)]


class PresetStore:
    """Named presets in ``presets.json`` (default: the config folder)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else paths.config_dir() / "presets.json"
        self.load_errors: list[str] = []  # what the last load() could not use

    def load(self) -> list[Preset]:
        self.load_errors = []
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.load_errors.append(f"Could not read the presets {self.path}: {exc}.")
            return []
        except (ValueError, RecursionError) as exc:
            return self._damaged(f"not valid JSON: {exc}")
        items = data.get("presets") if isinstance(data, dict) else None
        if not isinstance(items, list):
            return self._damaged('no "presets" list')
        presets: list[Preset] = []
        for n, item in enumerate(items[:MAX_PRESETS]):
            preset = self._preset(item, n, [p.name for p in presets])
            if preset is not None:
                presets.append(preset)
        return presets

    def _preset(self, item: object, n: int, names: list[str]) -> Preset | None:
        name = item.get("name") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(name, str) or name_problem(name, names) or not isinstance(values, dict):
            self.load_errors.append(f"Preset {n + 1} in {self.path.name} is unusable; left out.")
            return None
        kept: dict[str, Any] = {}
        for key, tp in _TYPES.items():
            if key not in values:
                continue
            value = coerce(tp, values[key])
            if value is MISSING:
                self.load_errors.append(
                    f'Preset "{name}": {LABELS[key]} should be {expected(tp)}, not '
                    f"{shown(values[key])}; the settings' value is used."
                )
            else:
                kept[key] = value
        return Preset(" ".join(name.split()), kept)

    def _damaged(self, reason: str) -> list[Preset]:
        message = f"The presets file {self.path} is damaged ({reason}); {set_aside(self.path)}."
        log.warning("%s", message)
        self.load_errors.append(message)
        return []

    def save(self, presets: Sequence[Preset]) -> None:
        document = {
            "version": 1,
            "presets": [{"name": p.name, "values": dict(p.values)} for p in presets],
        }
        try:
            write_atomic(self.path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise PresetError(f"Could not save the presets to {self.path}: {exc}.") from exc


def find_preset(presets: Sequence[Preset], name: str) -> Preset | None:
    """The preset called ``name`` (None: Default, or one since deleted)."""
    return next((p for p in presets if p.name == name), None)
