"""Each setting is declared once (``Settings``'s fields with their ``Setting``); the
labels, the validation and the reload set read the declarations, so a new
setting that reaches the engine cannot be forgotten in the reload set."""

from __future__ import annotations

import dataclasses
import itertools
import typing
from pathlib import Path
from typing import Any, Literal

from gambit.models.settings_check import model_file_problems
from gambit.storage.settings import LABELS, MODEL_FIELDS, RELOADS, SETTINGS, Settings

FIELDS = [f.name for f in dataclasses.fields(Settings)]
_TYPES = typing.get_type_hints(Settings)


def _other(name: str, value: Any, folder: Path) -> Any:
    """A valid value of field ``name`` other than ``value``."""
    tp = _TYPES[name]
    if typing.get_origin(tp) is Literal:
        return next(c for c in typing.get_args(tp) if c != value)
    if tp is bool:
        return not value
    if tp is int:
        return value + 1 if name != "fixed_gamma" else value - 1  # (at most max γ)
    if tp is float:
        return value / 2
    if name.endswith("_model"):
        return str(folder / f"{name}.gguf")
    if tp == tuple[str, ...]:  # worker addresses
        return (*value, "127.0.0.1:50099")
    return value + "x"


def _engine_side(s: Settings, folder: Path) -> tuple[object, ...]:
    """Everything a loaded engine is made from: the config (with the target the
    window resolves), the runtime options and whether a draft is derived."""
    target = s.target_path() or folder / "default.gguf"
    return (s.engine_config(target, folder / "derived.gguf"), s.target_options())


def test_every_field_is_declared_with_a_label() -> None:
    assert list(SETTINGS) == FIELDS
    assert all(LABELS[name] == SETTINGS[name].label and LABELS[name] for name in FIELDS)


def test_a_field_reaches_the_engine_exactly_when_it_is_declared_to_reload(
    tmp_path: Path,
) -> None:
    """For each field, under each drafter: change it alone and compare what the
    engine is built from. A change that reaches it must reload (forgetting it
    would keep the old model loaded); a declared reload that never reaches it
    would reload for nothing."""
    reaching: set[str] = set()
    # (with workers, their layer count reaches the target; without, the GPU layers do)
    for drafter, workers in itertools.product(
        ("none", "lookup", "draft", "layerskip"), ((), ("127.0.0.1:50052",))
    ):
        base = Settings(
            drafter=drafter,
            draft_model=str(tmp_path / "d.gguf"),
            tree_drafts=True,
            rpc_workers=workers,
        )
        before = _engine_side(base, tmp_path)
        for name in FIELDS:
            changed = base.with_(**{name: _other(name, getattr(base, name), tmp_path)})
            if _engine_side(changed, tmp_path) != before:
                reaching.add(name)
    missing = reaching - RELOADS
    assert not missing, f"reach the engine but are not declared reloads=True: {missing}"
    assert reaching == RELOADS


def test_a_field_changes_the_model_files_exactly_when_it_is_declared_model_file(
    tmp_path: Path,
) -> None:
    """For each field, under each drafter: change it alone and compare the model
    files the settings name. A change of files is checked before it is applied
    (the window reads MODEL_FIELDS), so a field that changes them without the
    declaration would skip that check."""
    changing: set[str] = set()
    for drafter in ("none", "lookup", "draft", "layerskip"):
        base = Settings(drafter=drafter, draft_model=str(tmp_path / "d.gguf"))
        before = (base.target_path(), base.draft_path())
        for name in FIELDS:
            changed = base.with_(**{name: _other(name, getattr(base, name), tmp_path)})
            if (changed.target_path(), changed.draft_path()) != before:
                changing.add(name)
    assert changing == MODEL_FIELDS == {"target_model", "drafter", "draft_model"}
    assert MODEL_FIELDS <= RELOADS  # new files: the models are loaded again


def test_the_file_check_reports_only_declared_model_fields(tmp_path: Path) -> None:
    for name in ("target", "draft"):
        (tmp_path / f"{name}.gguf").write_bytes(b"not a model")
    s = Settings(
        target_model=str(tmp_path / "target.gguf"),
        drafter="draft",
        draft_model=str(tmp_path / "draft.gguf"),
    )
    problems = model_file_problems(s)
    assert set(problems) == {"target_model", "draft_model"}
    assert set(problems) <= MODEL_FIELDS


def test_validation_reads_the_declared_ranges() -> None:
    for name, declared in SETTINGS.items():
        if not declared.rule or declared.high_field:
            continue
        outside = (declared.low - 1) if declared.low is not None else declared.high + 1  # type: ignore[operator]
        if declared.low is not None and declared.low_open:
            outside = declared.low
        problems = Settings().with_(**{name: outside}).validate()
        assert f"{declared.label} {declared.rule}" in problems, name
    assert Settings(threads=-1).validate() == [
        "Threads must be 0 (automatic) or a whole number from 1 to 512, not -1."
    ]
