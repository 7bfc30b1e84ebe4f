"""The user's models: a models folder of our own, folders the user adds, and
files imported one by one (copied in, or referenced where they are).

The library is an index in the data folder (``library.json``) holding each
model's header metadata, so listing it reads no model file. Entries are keyed
by the file's real path; two paths to one file (a symlink, ``..``, a hard
link) are one entry. Every change re-reads the index, applies itself and
writes the index atomically (a temporary file, then a rename), so a crash or a
second process never leaves a half-written index.

Bad files never break the library: importing one raises its specific
``ModelFileError`` and changes nothing; a rescan lists them apart from the
models, each with its message.
"""

from __future__ import annotations

import contextlib
import filecmp
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from gambit.errors import GambitError, ModelFileError, ModelNotFoundError, NotAFileError
from gambit.formats.gguf_file import check_model_file
from gambit.formats.gguf_info import ModelInfo, inspect_model
from gambit.fsutil import Progress, make_private_dirs, write_atomic
from gambit.models.pairing import compatible_drafts
from gambit.storage import paths
from gambit.storage.files import set_aside

log = logging.getLogger(__name__)

INDEX_VERSION = 1
Origin = Literal["folder", "referenced", "copied", "derived", "downloaded"]
# Files Gambit itself wrote into the models folder: the only ones it may delete.
_OWNED_ORIGINS = ("copied", "derived", "downloaded")
# Files found where they are: adding one again never changes how it came.
_FOUND_ORIGINS = ("folder", "referenced")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LibraryEntry:
    path: Path  # the real path
    info: ModelInfo
    origin: Origin
    draft_for: tuple[str, ...] = ()  # real paths of the targets it was made or chosen for


@dataclass(frozen=True)
class ScanProblem:
    path: Path
    message: str


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class ModelLibrary:
    """The index at ``index_path`` (default: ``library.json`` in the data folder)
    over ``models_dir`` (default: the data folder's ``models``), the folders
    added with ``add_folder`` and the files imported one by one.

    ``entries()`` lists what the index holds, without opening a model file;
    ``rescan()`` re-reads the folders and files and returns the usable models,
    ``problems()`` the files that are not, with their error messages.
    """

    def __init__(
        self,
        index_path: str | os.PathLike[str] | None = None,
        models_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.index_path = Path(index_path) if index_path else paths.library_index()
        self.models_dir = Path(models_dir) if models_dir else paths.models_dir()
        # What went wrong reading the index (it was damaged and set aside), as
        # sentences for the user; the CLI and the models dialog show them.
        self.notices: list[str] = []
        self._data = self._load()

    # ------------------------------------------------------------------ reading
    def entries(self) -> list[LibraryEntry]:
        self._data = self._load()
        out = [self._entry(key, raw) for key, raw in self._data["entries"].items()]
        return sorted((e for e in out if e is not None), key=lambda e: (e.info.name, str(e.path)))

    def problems(self) -> list[ScanProblem]:
        """Files the last rescan could not use, each with its error message."""
        self._data = self._load()
        return [ScanProblem(Path(p["path"]), p["message"]) for p in self._data["problems"]]

    def unlisted(self) -> list[Path]:
        """``.gguf`` files in the models folder and the added folders that the index
        neither lists nor reports as a problem (put there by hand, or fetched as the
        default model): a ``rescan()`` would take them in."""
        self._data = self._load()
        data = self._data
        known = {*data["entries"], *data["hidden"], *(p["path"] for p in data["problems"])}
        out: list[Path] = []
        for folder in [self.models_dir, *map(Path, data["folders"])]:
            out += [
                p for p in _gguf_files(folder) if _key(p) not in known and self._find(p) is None
            ]
        return out

    def folders(self) -> list[Path]:
        self._data = self._load()
        return [Path(f) for f in self._data["folders"]]

    def get(self, path: str | os.PathLike[str]) -> LibraryEntry | None:
        self._data = self._load()
        key = self._find(path)
        return self._entry(key, self._data["entries"][key]) if key else None

    def drafts_for(self, target: ModelInfo | str | os.PathLike[str]) -> list[ModelInfo]:
        """The library's models that can draft for ``target``, smallest first."""
        info = target if isinstance(target, ModelInfo) else self._info_for(target)
        bad = {p.path for p in self.problems()}
        return compatible_drafts(info, (e.info for e in self.entries() if e.path not in bad))

    # ------------------------------------------------------------------ folders
    def add_folder(self, folder: str | os.PathLike[str]) -> list[ModelInfo]:
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise GambitError(f"not a folder: {path}")
        key = _key(path)
        with self._changing() as data:
            if key not in data["folders"]:
                data["folders"].append(key)
        return self.rescan()

    def remove_folder(self, folder: str | os.PathLike[str]) -> None:
        """Stop scanning ``folder``: the models found only there leave the library
        (their files stay)."""
        key = _key(folder)
        with self._changing() as data:
            if key not in data["folders"]:
                raise GambitError(f"this folder is not in the library: {folder}")
            data["folders"].remove(key)
        self.rescan()

    # ------------------------------------------------------------------ files
    def import_file(
        self,
        path: str | os.PathLike[str],
        copy: bool = False,
        progress: Progress | None = None,
    ) -> ModelInfo:
        """Add one model file: referenced where it is, or copied into the models folder.

        The file is checked first; a bad one raises its ``ModelFileError`` and
        leaves the library as it was. Only a copy this call makes counts as
        "copied" (a file Gambit may delete): when the file, or the same bytes,
        is in the models folder already, that file is the user's and keeps how
        it came.
        """
        src = Path(path).expanduser()
        info = inspect_model(src)
        if copy:
            dest = self.models_dir / src.name
            origin: Origin = "folder"
            if _identity(dest) != _identity(src) and not _same_content(src, dest):
                if dest.exists():
                    raise GambitError(
                        f"a different file named {src.name} is already in the models folder "
                        f"({self.models_dir}); rename one of them first"
                    )
                self._copy(src, dest, progress)
                origin = "copied"
            info = inspect_model(dest)
            return self._add(dest, info, origin)
        return self._add(src, info, "referenced")

    def add_file(self, path: str | os.PathLike[str], origin: Origin = "referenced") -> ModelInfo:
        """Add a file where it is (checked first), recording how it came."""
        src = Path(path).expanduser()
        return self._add(src, inspect_model(src), origin)

    def remove(self, path: str | os.PathLike[str], delete_file: bool = False) -> Path | None:
        """Forget a model. Returns the path of the file deleted, if any: only a
        file Gambit put into its models folder (copied, derived, downloaded) is
        deleted, and only with ``delete_file``."""
        deleted: Path | None = None
        with self._changing() as data:
            key = self._find(path, data)
            if key is None:
                raise GambitError(f"this model is not in the library: {path}")
            raw = data["entries"].pop(key)
            for other in data["entries"].values():
                other["draft_for"] = [t for t in other.get("draft_for", []) if t != key]
            owned = raw["origin"] in _OWNED_ORIGINS and _is_under(key, _key(self.models_dir))
            if delete_file and owned:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(key)
                deleted = Path(key)
            elif key not in data["hidden"]:
                # It may still be in (or linked from) a folder the library scans:
                # remember not to list it again until it is imported again.
                data["hidden"].append(key)
        if delete_file and deleted is None:
            log.info("not deleting %s: Gambit did not put it in its models folder", path)
        return deleted

    def register_draft(
        self,
        target: str | os.PathLike[str],
        draft: str | os.PathLike[str],
        origin: Origin = "referenced",
    ) -> LibraryEntry:
        """Record ``draft`` as a draft for ``target`` (adding either if needed)."""
        t_info, d_info = inspect_model(target), inspect_model(draft)
        self._add(Path(target), t_info, "referenced")
        self._add(Path(draft), d_info, origin)
        with self._changing() as data:
            t_key = self._find(target, data)
            d_key = self._find(draft, data)
            assert t_key is not None and d_key is not None
            links = data["entries"][d_key].setdefault("draft_for", [])
            if t_key not in links:
                links.append(t_key)
            raw = data["entries"][d_key]
        entry = self._entry(d_key, raw)
        assert entry is not None
        return entry

    def rescan(self) -> list[ModelInfo]:
        """Re-read the folders and imported files; return the good models.

        Headers are re-read only for files whose size or time changed. Files
        that cannot be used are kept out of the list and reported by
        ``problems()`` with their error message.
        """
        with self._changing() as data:
            old = data["entries"]
            found: dict[str, dict[str, Any]] = {}
            problems: list[dict[str, str]] = []
            seen_ids: dict[tuple[int, int], str] = {}
            candidates: list[tuple[Path, Origin]] = []
            for folder in [self.models_dir, *map(Path, data["folders"])]:
                candidates += [(p, "folder") for p in _gguf_files(folder)]
            for key, raw in old.items():
                if raw["origin"] != "folder":
                    candidates.append((Path(key), raw["origin"]))
            for path, origin in candidates:
                key = _key(path)
                if key in data["hidden"]:
                    continue
                ident = _identity(key)
                if ident is not None and ident in seen_ids:
                    key = seen_ids[ident]
                    if key in found and origin != "folder":
                        found[key]["origin"] = origin  # an explicit import wins
                    continue
                prev = old.get(key)
                if prev is not None and origin == "folder":
                    origin = prev["origin"]
                try:
                    raw = self._fresh(key, prev, origin)
                except (ModelFileError, OSError) as exc:
                    message = str(exc) if isinstance(exc, ModelFileError) else f"{exc}: {key}"
                    problems.append({"path": key, "message": message})
                    if prev is not None and origin != "folder":
                        found[key] = prev  # imported by hand: keep it, reported missing/bad
                    continue
                if ident is not None:
                    seen_ids[ident] = key
                found[key] = raw
            data["entries"] = found
            data["problems"] = problems
        bad = {p.path for p in self.problems()}
        return sorted(
            (e.info for e in self.entries() if e.path not in bad),
            key=lambda i: (i.name, str(i.path)),
        )

    # ----------------------------------------------------------------- internals
    def _info_for(self, path: str | os.PathLike[str]) -> ModelInfo:
        entry = self.get(path)
        return entry.info if entry else inspect_model(path)

    def _add(self, path: Path, info: ModelInfo, origin: Origin) -> ModelInfo:
        with self._changing() as data:
            key = self._find(path, data) or _key(path)
            prev = data["entries"].get(key)
            if prev is not None and origin in _FOUND_ORIGINS:
                origin = prev["origin"]  # importing again does not change how it came
            raw = self._record(key, info, origin)
            if prev is not None:
                raw["draft_for"] = prev.get("draft_for", [])
            data["entries"][key] = raw
            if key in data["hidden"]:
                data["hidden"].remove(key)
            data["problems"] = [p for p in data["problems"] if p["path"] != key]
            stored = raw["info"]
        return ModelInfo.from_json(stored)

    def _fresh(self, key: str, prev: dict[str, Any] | None, origin: Origin) -> dict[str, Any]:
        """The index record of ``key``, re-reading the header only if the file changed."""
        try:
            st = os.stat(key)
        except FileNotFoundError as exc:
            raise ModelNotFoundError(key, "model file not found") from exc
        except OSError as exc:
            raise NotAFileError(key, f"the model file cannot be read ({exc.strerror})") from exc
        if (
            prev is not None
            and prev.get("size") == st.st_size
            and prev.get("mtime_ns") == st.st_mtime_ns
        ):
            try:
                ModelInfo.from_json(prev["info"])
                return {**prev, "origin": origin}
            except (KeyError, TypeError, ValueError):
                pass  # written by another version: read the header again
        raw = self._record(key, inspect_model(key), origin)
        if prev is not None:
            raw["draft_for"] = prev.get("draft_for", [])
        return raw

    @staticmethod
    def _record(key: str, info: ModelInfo, origin: Origin) -> dict[str, Any]:
        st = os.stat(key)
        data = info.to_json()
        data["path"] = key
        return {
            "origin": origin,
            "draft_for": [],
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "info": data,
        }

    def _entry(self, key: str, raw: dict[str, Any]) -> LibraryEntry | None:
        try:
            info = ModelInfo.from_json(raw["info"])
        except (KeyError, TypeError, ValueError):
            return None
        return LibraryEntry(
            path=Path(key),
            info=info,
            origin=raw.get("origin", "referenced"),
            draft_for=tuple(raw.get("draft_for", [])),
        )

    def _find(self, path: str | os.PathLike[str], data: dict[str, Any] | None = None) -> str | None:
        data = data if data is not None else self._data
        key = _key(path)
        if key in data["entries"]:
            return key
        ident = _identity(key)
        if ident is None:
            return None
        for other in data["entries"]:
            if _identity(other) == ident:
                return str(other)
        return None

    def _copy(self, src: Path, dest: Path, progress: Progress | None) -> None:
        make_private_dirs(dest.parent)
        total = src.stat().st_size
        free = shutil.disk_usage(dest.parent).free
        if free < total:
            raise GambitError(
                f"not enough disk space to copy {src.name}: it needs {total / 1e6:,.0f} MB, "
                f"{free / 1e6:,.0f} MB are free in {dest.parent}"
            )
        tmp = dest.with_name(f".{dest.name}.part")
        done = 0
        try:
            with src.open("rb") as fin, tmp.open("wb") as fout:
                if progress:
                    progress("copying", 0, total)
                while chunk := fin.read(_CHUNK):
                    fout.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress("copying", done, total)
            check_model_file(tmp)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)

    # -------------------------------------------------------------- persistence
    def _load(self) -> dict[str, Any]:
        empty: dict[str, Any] = {
            "version": INDEX_VERSION,
            "folders": [],
            "entries": {},
            "problems": [],
            "hidden": [],
        }
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return empty
        try:
            data: dict[str, Any] = json.loads(raw)
            _check_index(data)
        except RecursionError:  # "[[[[..." nested deeper than Python's stack
            self._set_aside("nested too deeply to read")
            return empty
        except (ValueError, TypeError, KeyError) as exc:  # UnicodeDecodeError is a ValueError
            self._set_aside(str(exc))
            return empty
        for name, value in empty.items():
            data.setdefault(name, value)
        return data

    def _set_aside(self, reason: str) -> None:
        """Keep the damaged index for inspection and start over: a rescan finds
        the files in the folders again."""
        message = f"The model library index {self.index_path} was damaged ({reason})"
        message += f"; {set_aside(self.index_path)}"
        message += ". The library starts empty: folders are scanned again, files imported one "
        message += "by one must be imported again."
        log.warning("%s", message)
        self.notices.append(message)

    def _save(self, data: dict[str, Any]) -> None:
        write_atomic(self.index_path, json.dumps(data, indent=1, sort_keys=True))

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, Any]]:
        """Re-read the index, let the caller change it, write it back atomically
        (not at all when the caller raises)."""
        data = self._load()
        yield data
        self._save(data)
        self._data = data


def _check_index(data: Any) -> None:
    """Raise ValueError unless ``data`` has the shape of a library index (what
    the code above indexes into without looking): a file edited by hand or
    written by something else must not crash every listing."""

    def strings(value: Any, what: str) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{what} is not a list of paths")

    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise ValueError("not a library index")
    for key, entry in data["entries"].items():
        if not isinstance(entry, dict) or entry.get("origin") not in get_args(Origin):
            raise ValueError(f"the entry for {key} is not a model record")
        if not isinstance(entry.get("info"), dict):
            raise ValueError(f"the entry for {key} has no model metadata")
        strings(entry.get("draft_for", []), f"draft_for of {key}")
    strings(data.get("folders", []), "folders")
    strings(data.get("hidden", []), "hidden")
    problems = data.get("problems", [])
    if not isinstance(problems, list) or not all(
        isinstance(p, dict) and isinstance(p.get("path"), str) and isinstance(p.get("message"), str)
        for p in problems
    ):
        raise ValueError("problems is not a list of messages")


def _same_content(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _gguf_files(folder: Path) -> list[Path]:
    """``*.gguf`` under ``folder``, skipping hidden files and folders (partial
    downloads, caches)."""
    out: list[Path] = []
    if not folder.is_dir():
        return out
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and name.lower().endswith(".gguf"):
                out.append(Path(root) / name)
        out += [
            Path(root) / d for d in dirs if d.lower().endswith(".gguf")
        ]  # a folder named *.gguf: reported as a problem
    return out
