"""How one user setting is declared: ``Setting``, and ``declare`` for a field.

``gambit.storage.settings`` declares every setting with these; the window's
labels, ranges and help lines, the validation, the reload set and the command
line's flags (``gambit.cli.setting_flags``) are read from the declarations.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """What one ``Settings`` field is, declared next to its default.

    ``label`` names it in the dialog and in every message about it; ``help``
    is the line under its widget. ``reloads``: a change needs the models
    loaded again (the field reaches ``EngineConfig`` or ``RuntimeOptions``).
    ``low``/``high`` bound valid values (``*_open``: the bound itself is not
    valid; ``high_field``: the bound is another field's value), and ``rule`` is
    the sentence after the label when a value is outside them. ``spin``: the
    dialog's range where it is narrower than the valid one (or has no end).
    ``problem``: a rule shared with the command line (``engine.machine.limits``); a
    value it refuses crashes llama.cpp, so a settings file never loads it.
    ``model_file``: it names a model file or decides which ones load, so a
    change has the files checked (``models.settings_check``) before the
    running model is unloaded for it.
    ``flag``: the command line takes it too, as this flag (``gambit.cli.setting_flags``
    makes the argument from this declaration: type, default, check and help);
    ``flag_help`` where the dialog's line does not suit a terminal; a bool
    with ``flag_sets`` False is a flag that turns the setting off.
    """

    label: str
    help: str = ""
    reloads: bool = False
    model_file: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    high_field: str | None = None
    rule: str = ""
    spin: tuple[float, float] | None = None
    problem: Callable[[Any], str | None] | None = None
    flag: str | None = None
    flag_help: str = ""
    flag_sets: bool = True

    def in_range(self, value: float, values: dict[str, Any]) -> bool:
        """Whether ``value`` is within the bounds (``values``: every field's, for
        a bound that is another field's value)."""
        high = values[self.high_field] if self.high_field else self.high
        low = self.low
        if low is not None and (value <= low if self.low_open else value < low):
            return False
        return high is None or (value < high if self.high_open else value <= high)

    def problem_with(self, value: Any) -> str | None:
        """What is wrong with ``value`` on its own, as the words after the label
        (None: nothing). A bound that is another field's value is
        ``Settings.validate``'s to check; here only the other bound is."""
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if self.problem is not None:
            return self.problem(value)
        if not self.rule or not isinstance(value, int | float):
            return None
        if self.high_field is None:
            return None if self.in_range(value, {}) else self.rule.rstrip(".")
        if self.low is not None and value < self.low:
            return f"must be {self.low:g} or more"
        return None

    @property
    def range(self) -> tuple[float, float]:
        """The dialog's spin-box range."""
        if self.spin is not None:
            return self.spin
        assert self.low is not None and self.high is not None, self.label
        return self.low, self.high


_T = typing.TypeVar("_T")


def declare(default: _T, label: str, **declared: Any) -> _T:
    """A ``Settings`` field with its ``Setting`` (read back with ``SETTINGS``)."""
    field: _T = dataclasses.field(default=default, metadata={"setting": Setting(label, **declared)})
    return field
