"""Gambit's folders and files are the user's alone: chats, settings, the model
library's index and logs that quote them are created 0700 (folders) and 0600
(files), whatever the umask lets others read."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.fsutil import make_private_dirs
from gambit.models.library import ModelLibrary
from gambit.storage import paths
from gambit.storage.chat_store.conversations import ConversationStore, default_store_path
from gambit.storage.files import move_aside, touch_private
from gambit.storage.settings import Settings, SettingsStore
from gguf_fixtures import write_small_model

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh GAMBIT_HOME (not created yet), under the usual umask 022."""
    home = tmp_path / "home"
    monkeypatch.setenv("GAMBIT_HOME", str(home))
    old = os.umask(0o022)
    try:
        yield home
    finally:
        os.umask(old)


def test_settings_file_and_folder(home: Path) -> None:
    store = SettingsStore()
    store.save(Settings(seed=3))
    assert _mode(home) == 0o700  # created for Gambit: private too
    assert _mode(paths.config_dir()) == 0o700
    assert _mode(store.path) == 0o600
    store.save(Settings(seed=4))  # a save replaces the file: still private
    assert _mode(store.path) == 0o600


def test_library_index_and_models_folder(home: Path, tmp_path: Path) -> None:
    library = ModelLibrary()
    library.import_file(write_small_model(tmp_path / "m.gguf"), copy=True)
    assert _mode(paths.data_dir()) == 0o700
    assert _mode(library.index_path) == 0o600
    assert _mode(paths.models_dir()) == 0o700


def test_chat_history_and_its_journal(home: Path) -> None:
    path = default_store_path()
    with ConversationStore(path) as store:
        conv = store.create("secret plans")
        store.add_message(conv, "user", "my password is hunter2")
        assert _mode(paths.data_dir()) == 0o700
        files = sorted(path.parent.glob(path.name + "*"))
        assert path in files and len(files) >= 2  # the database and its WAL
        assert {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}


def test_a_chat_history_from_before_is_made_private(home: Path) -> None:
    path = default_store_path()
    with ConversationStore(path) as store:
        store.create("old")
    path.chmod(0o644)  # as an older Gambit left it
    with ConversationStore(path) as store:
        assert [c.title for c in store.list()] == ["old"]
    assert _mode(path) == 0o600


LOGS = """
import logging, sys
from gambit import logs
logs.setup_logging(console=False)
logging.getLogger("gambit.test").warning("a line that quotes a chat")
[handler] = [h for h in logging.getLogger().handlers if hasattr(h, "doRollover")]
handler.doRollover()  # the next file after a rotation
logging.getLogger("gambit.test").warning("after the rotation")
try:
    raise RuntimeError("boom")
except RuntimeError as exc:
    print(logs.write_crash_report(type(exc), exc, exc.__traceback__))
print(logs._enable_faulthandler())
"""


def test_log_files_and_crash_reports(home: Path) -> None:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-c", LOGS], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    report, native = (Path(line) for line in proc.stdout.split())
    log_dir = paths.log_dir()
    assert _mode(log_dir) == 0o700 and _mode(report.parent) == 0o700
    written = [log_dir / "gambit.log", log_dir / "gambit.log.1", report, native]
    assert {p.name: _mode(p) for p in written} == {p.name: 0o600 for p in written}
    assert "after the rotation" in (log_dir / "gambit.log").read_text()


def test_folders_that_exist_are_left_as_they_are(tmp_path: Path) -> None:
    mine = tmp_path / "users-own"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    make_private_dirs(mine / "a" / "b")
    assert _mode(mine) == 0o755
    assert _mode(mine / "a") == 0o700 and _mode(mine / "a" / "b") == 0o700
    (mine / "a" / "b" / "file").write_text("")
    with pytest.raises(NotADirectoryError):  # a file in the way: said, not ignored
        make_private_dirs(mine / "a" / "b" / "file" / "sub")


def test_touch_private_keeps_the_owners_bits(tmp_path: Path) -> None:
    path = tmp_path / "read-only.db"
    path.write_text("x")
    path.chmod(0o444)
    touch_private(path)
    assert _mode(path) == 0o400 and path.read_text() == "x"


def test_move_aside_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    kept = []
    for content in ("one", "two", "three"):
        path.write_text(content)
        kept.append(move_aside(path))
    assert not path.exists()
    assert [p.read_text() for p in kept] == ["one", "two", "three"]
    assert len(set(kept)) == 3
    assert all(p.name.startswith("settings.json.corrupt-") for p in kept)
