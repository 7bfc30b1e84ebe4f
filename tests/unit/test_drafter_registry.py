"""The drafter registry is the one list of drafter kinds: everything that names
a kind (the engine's type, the settings, the command line, the reports) agrees
with it."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from gambit.bench.measure import DRAFTER_LABELS
from gambit.cli.main import build_parser, chosen_drafter
from gambit.engine.drafters.registry import (
    DRAFTERS,
    DRAFTING,
    TREE_DRAFTERS,
    BuildInput,
    DrafterKind,
    short_name,
    spec,
    tag,
)
from gambit.engine.session import EngineConfig
from gambit.errors import GambitError, ModelFileError
from gambit.models.drafter_files import DERIVATIONS, DraftFile, resolve_drafter_file
from gambit.storage.settings import Settings


def test_every_kind_of_the_type_has_one_record() -> None:
    assert set(DRAFTERS) == set(typing.get_args(DrafterKind))
    assert all(kind == record.kind for kind, record in DRAFTERS.items())
    assert "none" not in DRAFTING and set(DRAFTING) | {"none"} == set(DRAFTERS)


def test_records_say_what_the_wiring_did_by_hand() -> None:
    assert TREE_DRAFTERS == ("lookup", "draft", "layerskip")
    assert [k for k, s in DRAFTERS.items() if s.free] == ["lookup"]
    assert {k: s.file for k, s in DRAFTERS.items()} == {
        "none": "none",
        "lookup": "none",
        "draft": "chosen",
        "draft+lookup": "chosen",
        "layerskip": "derived",
    }
    assert DRAFTER_LABELS == {
        "lookup": "prompt lookup",
        "draft": "draft model",
        "draft+lookup": "draft model + lookup",
        "layerskip": "layer skip",
    }
    assert short_name("mtp") == "mtp" and tag("layerskip") == "layer skip"
    with pytest.raises(KeyError):
        spec("mtp")


def test_lookup_builds_without_a_model() -> None:
    built = spec("lookup").build(BuildInput(None, None, None, 3))  # type: ignore[arg-type]
    assert built.drafter is not None and built.drafter.name == spec("lookup").short
    assert spec("none").build(BuildInput(None, None, None, 3)).drafter is None  # type: ignore[arg-type]


def test_the_command_line_has_one_flag_per_drafting_kind(tmp_path: Path) -> None:
    parser = build_parser()
    draft = tmp_path / "d.gguf"
    for argv, kind in (
        ([], "none"),
        (["--lookup"], "lookup"),
        (["--draft", str(draft)], "draft"),
        (["--layer-skip"], "layerskip"),
        (["--draft", str(draft), "--lookup"], "draft+lookup"),  # the one that combines
    ):
        args = parser.parse_args(["generate", *argv, "hello"])
        assert chosen_drafter(args).kind == kind
    for argv in (["--lookup", "--layer-skip"], ["--draft", str(draft), "--layer-skip"]):
        args = parser.parse_args(["generate", *argv, "hello"])
        with pytest.raises(GambitError, match="cannot be used together"):
            chosen_drafter(args)


def test_settings_resolve_the_draft_file_by_the_record(tmp_path: Path) -> None:
    target, chosen, derived = tmp_path / "t.gguf", tmp_path / "d.gguf", tmp_path / "ls.gguf"
    config = Settings(drafter="draft", draft_model=str(chosen)).engine_config(target, derived)
    assert config.draft == chosen
    config = Settings(drafter="layerskip", draft_model=str(chosen)).engine_config(target, derived)
    assert config.draft == derived
    config = Settings(drafter="lookup", draft_model=str(chosen)).engine_config(target, derived)
    assert config.draft is None
    with pytest.raises(ValueError, match="draft model path"):
        EngineConfig(target=target, drafter="draft")
    problems = Settings(drafter="bogus").validate()  # type: ignore[arg-type]
    assert any(p.startswith("Drafter must be one of") for p in problems)


def test_every_derived_kind_has_its_derivation() -> None:
    derived = {kind for kind, record in DRAFTERS.items() if record.file == "derived"}
    assert set(DERIVATIONS) == derived
    assert all(d.activity and d.cancelled for d in DERIVATIONS.values())


def test_files_of_kinds_that_derive_nothing_are_resolved_without_deriving(tmp_path: Path) -> None:
    activities: list[str] = []

    def progress(activity: str) -> None:
        activities.append(activity)

    chosen = tmp_path / "draft.gguf"
    assert resolve_drafter_file("none", tmp_path / "t.gguf", chosen=chosen, progress=progress) == (
        DraftFile(None)
    )
    assert resolve_drafter_file("lookup", tmp_path / "t.gguf", progress=progress).path is None
    assert resolve_drafter_file("draft", tmp_path / "t.gguf", chosen=chosen).path == chosen
    assert activities == []


def test_a_derived_file_is_derived_from_the_target(tmp_path: Path) -> None:
    activities: list[str] = []

    def progress(activity: str) -> None:
        activities.append(activity)

    target = tmp_path / "not-a-model.gguf"
    target.write_bytes(b"plain text, no GGUF header")
    # The derivation reads the target first: a file that is no model stops it
    # with a message that names the file.
    with pytest.raises(ModelFileError, match=re.escape("not-a-model.gguf")):
        resolve_drafter_file("layerskip", target, progress=progress)
    assert activities == [DERIVATIONS["layerskip"].activity]
