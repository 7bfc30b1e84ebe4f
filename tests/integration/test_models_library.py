"""The model library on real files: import (reference or copy), rescan, remove,
restart, one entry per file however it is reached, and bad files that never
break it."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gambit.errors import (
    EmptyModelFileError,
    GambitError,
    ModelFileError,
    NotAFileError,
    NotGGUFError,
    TruncatedModelError,
)
from gambit.formats.gguf_info import inspect_model
from gambit.models.library import ModelLibrary
from gguf_fixtures import write_small_model


@pytest.fixture
def lib(tmp_path: Path) -> ModelLibrary:
    return ModelLibrary(tmp_path / "data" / "library.json", tmp_path / "data" / "models")


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory, smol_q4_1: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    with smol_q4_1.open("rb") as f:
        head = f.read(1 << 20)
    files = {
        "truncated": folder / "truncated.gguf",
        "empty": folder / "empty.gguf",
        "random": folder / "random.gguf",
        "directory": folder / "directory.gguf",
    }
    files["truncated"].write_bytes(head)  # cut inside the 1.7 MB header
    files["empty"].write_bytes(b"")
    files["random"].write_bytes(os.urandom(4096))
    files["directory"].mkdir()
    return files


BAD_ERRORS: dict[str, tuple[type[ModelFileError], str]] = {
    "truncated": (TruncatedModelError, "truncated"),
    "empty": (EmptyModelFileError, "empty"),
    "random": (NotGGUFError, "not a GGUF model file"),
    "directory": (NotAFileError, "folder, not a model file"),
}


def _index_bytes(lib: ModelLibrary) -> bytes:
    return lib.index_path.read_bytes()


def test_reference_and_restart(lib: ModelLibrary, smol_q4_1: Path, smol_q8_0: Path) -> None:
    assert lib.entries() == []
    info = lib.import_file(smol_q4_1)
    assert info.quantization == "Q4_1"
    lib.import_file(smol_q8_0)
    assert lib.index_path.is_file()
    # a new library object on the same index: a restart
    again = ModelLibrary(lib.index_path, lib.models_dir)
    entries = again.entries()
    assert [e.path for e in entries] == sorted(
        [smol_q4_1.resolve(), smol_q8_0.resolve()], key=lambda p: (inspect_model(p).name, str(p))
    )
    assert {e.origin for e in entries} == {"referenced"}
    assert {e.info.quantization for e in entries} == {"Q4_1", "Q8_0"}
    # listing reads no model file: the metadata comes from the index
    data = json.loads(lib.index_path.read_text())
    assert data["version"] == 1 and len(data["entries"]) == 2
    # rescan keeps referenced files that live outside the library's folders
    assert {i.path for i in again.rescan()} == {smol_q4_1.resolve(), smol_q8_0.resolve()}
    assert again.problems() == []


def test_two_paths_to_one_file_are_one_entry(
    lib: ModelLibrary, tmp_path: Path, smol_q4_1: Path
) -> None:
    link = tmp_path / "link.gguf"
    link.symlink_to(smol_q4_1)
    dotted = smol_q4_1.parent / ".." / smol_q4_1.parent.name / smol_q4_1.name
    hard = tmp_path / "hard.gguf"
    try:
        os.link(smol_q4_1, hard)
    except OSError:
        hard = link  # another file system: the hard-link case cannot be made here
    for path in (smol_q4_1, link, dotted, hard):
        lib.import_file(path)
    entries = lib.entries()
    assert len(entries) == 1, [e.path for e in entries]
    for path in (link, dotted, hard):
        found = lib.get(path)
        assert found is not None and found.path == entries[0].path
    # a folder holding a symlink and the file itself: still one entry
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.gguf").symlink_to(smol_q4_1)
    (folder / "b.gguf").symlink_to(link)
    lib.add_folder(folder)
    assert len(lib.entries()) == 1
    assert lib.problems() == []
    # removing through another path removes the one entry, for good
    lib.remove(link)
    assert lib.entries() == []
    assert lib.rescan() == [] and lib.entries() == []
    lib.import_file(dotted)  # until imported again
    assert len(lib.entries()) == 1


@pytest.mark.parametrize("name", list(BAD_ERRORS))
def test_bad_import_leaves_library_intact(
    lib: ModelLibrary, bad_files: dict[str, Path], smol_q4_1: Path, name: str
) -> None:
    lib.import_file(smol_q4_1)
    before = _index_bytes(lib)
    error, text = BAD_ERRORS[name]
    with pytest.raises(error) as info:
        lib.import_file(bad_files[name], copy=(name == "truncated"))
    assert text in str(info.value) and str(bad_files[name]) in str(info.value)
    assert _index_bytes(lib) == before
    assert [e.path for e in ModelLibrary(lib.index_path, lib.models_dir).entries()] == [
        smol_q4_1.resolve()
    ]
    assert not lib.models_dir.exists() or not any(lib.models_dir.iterdir())


UNREADABLE_SCRIPT = r"""
import sys
from pathlib import Path
from gambit.errors import NotAFileError
from gambit.models.library import ModelLibrary

home, good, locked = map(Path, sys.argv[1:4])
lib = ModelLibrary(home / "library.json", home / "models")
lib.import_file(good)
before = lib.index_path.read_bytes()
try:
    lib.import_file(locked)
except NotAFileError as exc:
    print("import:", exc)
assert lib.index_path.read_bytes() == before, "the index changed"
infos = lib.add_folder(locked.parent)
print("listed:", [i.path.name for i in infos])
for problem in lib.problems():
    print("problem:", problem.message)
"""


def test_unreadable_file(tmp_path: Path, smol_q4_1: Path) -> None:
    """A file the user may not read: a clear error, and the library carries on.
    As root (which reads mode-000 files), the check runs without the
    capabilities that bypass file permissions."""
    folder = tmp_path / "folder"
    folder.mkdir()
    locked = folder / "locked.gguf"
    locked.write_bytes(b"GGUF" + bytes(60))
    locked.chmod(0)
    cmd = [sys.executable, "-c", UNREADABLE_SCRIPT, str(tmp_path / "home"), str(smol_q4_1)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root reads mode-000 files, and setpriv is missing to drop that")
        cmd = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *cmd]
    try:
        proc = subprocess.run(
            [*cmd, str(locked)], capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        locked.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert f"import: the model file cannot be read (permission denied): {locked}" in out
    assert f"listed: [{smol_q4_1.name!r}]" in out  # the good model stays listed
    assert f"problem: the model file cannot be read (permission denied): {locked}" in out


def test_rescan_lists_bad_files_apart(
    lib: ModelLibrary, bad_files: dict[str, Path], smol_q4_1: Path
) -> None:
    folder = next(iter(bad_files.values())).parent
    good = folder / "good.gguf"
    if not good.exists():
        good.symlink_to(smol_q4_1)
    infos = lib.add_folder(folder)
    assert [i.path for i in infos] == [smol_q4_1.resolve()]
    problems = {p.path.name: p.message for p in lib.problems()}
    assert set(problems) == {f"{n}.gguf" for n in BAD_ERRORS}
    for name, (_, text) in BAD_ERRORS.items():
        assert text in problems[f"{name}.gguf"]
    # the problems survive a restart too, and a second rescan changes nothing
    again = ModelLibrary(lib.index_path, lib.models_dir)
    assert len(again.problems()) == len(BAD_ERRORS)
    assert [i.path for i in again.rescan()] == [smol_q4_1.resolve()]
    lib.remove_folder(folder)
    assert lib.entries() == [] and lib.problems() == []


def test_copy_into_models_folder_with_progress(lib: ModelLibrary, smol_q4_1: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    info = lib.import_file(smol_q4_1, copy=True, progress=lambda *a: seen.append(a))
    dest = lib.models_dir / smol_q4_1.name
    assert info.path == dest and dest.stat().st_size == smol_q4_1.stat().st_size
    assert seen[0] == ("copying", 0, dest.stat().st_size)
    assert seen[-1] == ("copying", dest.stat().st_size, dest.stat().st_size)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
    assert not list(lib.models_dir.glob(".*"))  # no partial file left
    (entry,) = lib.entries()
    assert entry.origin == "copied"
    # copying again is a no-op, not a duplicate
    lib.import_file(dest, copy=True)
    assert len(lib.entries()) == 1
    # remove without delete_file keeps the file, and rescan does not bring it back
    assert lib.remove(dest) is None
    assert dest.is_file()
    assert lib.rescan() == [] and lib.entries() == []
    # importing it again finds the file there: once forgotten, it is not known
    # to be Gambit's copy, so it is never deleted
    lib.import_file(smol_q4_1, copy=True)
    (entry,) = lib.entries()
    assert entry.origin == "folder"
    assert lib.remove(dest, delete_file=True) is None
    assert dest.is_file()
    # a copy Gambit makes is deleted with delete_file
    dest.unlink()
    lib.import_file(smol_q4_1, copy=True)
    assert lib.remove(dest, delete_file=True) == dest
    assert not dest.exists()


def test_remove_never_deletes_a_referenced_file(lib: ModelLibrary, smol_q4_1: Path) -> None:
    lib.import_file(smol_q4_1)
    assert lib.remove(smol_q4_1, delete_file=True) is None
    assert smol_q4_1.is_file()
    with pytest.raises(GambitError, match="not in the library"):
        lib.remove(smol_q4_1)


def test_damaged_index_is_set_aside(lib: ModelLibrary, smol_q4_1: Path) -> None:
    lib.import_file(smol_q4_1)
    lib.index_path.write_text('{"entries": {"half-writ')
    again = ModelLibrary(lib.index_path, lib.models_dir)
    assert again.entries() == []
    [aside] = lib.index_path.parent.glob("library.json.corrupt-*")
    assert aside.read_text() == '{"entries": {"half-writ'
    [notice] = again.notices
    assert "was damaged" in notice and aside.name in notice
    again.import_file(smol_q4_1)
    assert len(ModelLibrary(lib.index_path, lib.models_dir).entries()) == 1


def test_drafts_for(lib: ModelLibrary, smol_q4_1: Path, smol_q8_0: Path, smol_f16: Path) -> None:
    for p in (smol_f16, smol_q8_0, smol_q4_1):
        lib.import_file(p)
    assert [i.quantization for i in lib.drafts_for(smol_f16)] == ["Q4_1", "Q8_0"]
    assert [i.quantization for i in lib.drafts_for(smol_q8_0)] == ["Q4_1"]
    assert lib.drafts_for(smol_q4_1) == []
    entry = lib.register_draft(smol_f16, smol_q4_1)
    assert entry.draft_for == (str(smol_f16.resolve()),)
    again = ModelLibrary(lib.index_path, lib.models_dir).get(smol_q4_1)
    assert again is not None and again.draft_for == (str(smol_f16.resolve()),)


# ------------------------------------------- an index damaged by hand or by another program

DAMAGED_INDEXES: dict[str, object] = {
    "deep-list": "[" * 100_000,
    "deep-entries": '{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "not-utf8": b"\xff\xfe{}",
    "entries-list": {"entries": []},
    "entry-number": {"entries": {"/m.gguf": 5}},
    "entry-no-origin": {"entries": {"/m.gguf": {"info": {}}}},
    "entry-bad-origin": {"entries": {"/m.gguf": {"origin": "stolen", "info": {}}}},
    "entry-info-list": {"entries": {"/m.gguf": {"origin": "copied", "info": []}}},
    "draft-for-number": {"entries": {"/m.gguf": {"origin": "folder", "info": {}, "draft_for": 3}}},
    "folders-text": {"entries": {}, "folders": "/home"},
    "hidden-number": {"entries": {}, "hidden": 5},
    "problems-texts": {"entries": {}, "problems": ["bad"]},
    "problem-without-path": {"entries": {}, "problems": [{"message": "x"}]},
}


@pytest.mark.parametrize("name", list(DAMAGED_INDEXES))
def test_damaged_index_never_breaks_the_library(
    lib: ModelLibrary, tmp_path: Path, name: str
) -> None:
    model = write_small_model(tmp_path / "small.gguf")
    content = DAMAGED_INDEXES[name]
    lib.index_path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        lib.index_path.write_bytes(content)
    else:
        lib.index_path.write_text(content if isinstance(content, str) else json.dumps(content))
    before = lib.index_path.read_bytes()

    again = ModelLibrary(lib.index_path, lib.models_dir)  # a restart
    assert again.entries() == [] and again.problems() == [] and again.folders() == []
    assert again.rescan() == []
    [aside] = lib.index_path.parent.glob("library.json.corrupt-*")
    assert aside.read_bytes() == before  # kept, to be looked at
    [notice] = again.notices
    assert notice.startswith(f"The model library index {lib.index_path} was damaged (")
    assert f"it was kept as {aside.name}" in notice
    # and the library works again from scratch
    again.import_file(model)
    entries = ModelLibrary(lib.index_path, lib.models_dir).entries()
    assert [e.path for e in entries] == [model.resolve()]


def test_a_record_with_wrong_types_is_read_again_from_the_file(
    lib: ModelLibrary, tmp_path: Path
) -> None:
    model = write_small_model(tmp_path / "small.gguf")
    lib.import_file(model)
    data = json.loads(lib.index_path.read_text())
    (record,) = data["entries"].values()
    record["info"]["n_params"] = "lots"  # would break every listing's arithmetic
    record["info"]["has_chat_template"] = 1
    lib.index_path.write_text(json.dumps(data))
    again = ModelLibrary(lib.index_path, lib.models_dir)
    assert again.entries() == []  # the record cannot be shown ...
    (info,) = again.rescan()  # ... and the header is read again
    assert info.n_params == 16_000 and info.has_chat_template is False
    assert again.notices == []


# ------------------------------------------------------------ never delete the user's file


def test_copying_a_file_onto_itself_does_not_make_it_gambits(lib: ModelLibrary) -> None:
    # The user's only copy, put into the models folder by hand.
    lib.models_dir.mkdir(parents=True)
    mine = write_small_model(lib.models_dir / "mine.gguf")
    lib.rescan()
    assert [e.origin for e in lib.entries()] == ["folder"]
    info = lib.import_file(mine, copy=True)  # "copy it in": it is in already
    assert info.path == mine.resolve()
    assert [e.origin for e in lib.entries()] == ["folder"]
    assert lib.remove(mine, delete_file=True) is None
    assert mine.is_file()


def test_copying_onto_a_file_not_yet_scanned_does_not_make_it_gambits(
    lib: ModelLibrary,
) -> None:
    lib.models_dir.mkdir(parents=True)
    mine = write_small_model(lib.models_dir / "mine.gguf")  # no rescan since
    lib.import_file(mine, copy=True)
    assert [e.origin for e in lib.entries()] == ["folder"]
    assert lib.remove(mine, delete_file=True) is None
    assert mine.is_file()


def test_a_copy_of_the_same_bytes_already_there_is_not_gambits(
    lib: ModelLibrary, tmp_path: Path
) -> None:
    # The user put a copy in the models folder, then imports the original with --copy.
    original = write_small_model(tmp_path / "original.gguf")
    lib.models_dir.mkdir(parents=True)
    theirs = lib.models_dir / "original.gguf"
    shutil.copyfile(original, theirs)
    info = lib.import_file(original, copy=True)
    assert info.path == theirs.resolve()
    assert [e.origin for e in lib.entries()] == ["folder"]
    assert lib.remove(theirs, delete_file=True) is None
    assert theirs.is_file() and original.is_file()


def test_importing_gambits_copy_again_keeps_it_gambits(lib: ModelLibrary, tmp_path: Path) -> None:
    original = write_small_model(tmp_path / "original.gguf")
    copy = lib.import_file(original, copy=True).path
    for again in (original, copy):
        lib.import_file(again, copy=True)
        lib.import_file(copy)  # referenced: no change either
        assert [e.origin for e in lib.entries()] == ["copied"]
    assert lib.remove(copy, delete_file=True) == copy
    assert not copy.exists() and original.is_file()
