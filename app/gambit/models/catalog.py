"""Known pairs of a target and a draft model, and downloading them from Hugging Face.

The catalog is ``models/catalog.json`` at the top of the project (see
``models/README.md``). Each file is pinned: a commit of its repository
(``revision``) and the SHA-256 of the file at that commit. A download is
checked against that hash before it is listed, and deleted if it does not
match; an entry with no recorded hash is not downloaded at all.

Downloads go through ``huggingface_hub.hf_hub_download`` into the models
folder, so its endpoint (``HF_ENDPOINT``), proxy, token and offline settings
apply. A connection that drops mid-transfer is picked up where it broke (HTTP
range requests, within the same download); a download that is stopped
(cancelled, the app closed or killed) starts over the next time, because
huggingface_hub deletes its partial file. Without network the error says so
and points to importing a file obtained some other way.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gambit.errors import GambitError
from gambit.formats.gguf_file import check_model_file
from gambit.fsutil import Progress, check_disk_space
from gambit.models.checksum import is_sha256, verify_sha256
from gambit.models.library import ModelLibrary

log = logging.getLogger(__name__)

CATALOG_ENV = "GAMBIT_CATALOG"
_HERE = Path(__file__).resolve()
_CANDIDATES = (
    _HERE.parents[3] / "models" / "catalog.json",  # a source checkout
    _HERE.parents[1] / "resources" / "catalog.json",  # an installed package
)
Which = Literal["both", "target", "draft"]
METADATA_TIMEOUT_S = 10.0
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class CatalogFile:
    repo: str  # Hugging Face repository, "owner/name"
    filename: str
    size_mb: int  # approximate, for the listing and the disk-space check
    params: str  # "7.6B"
    revision: str = "main"  # a commit (40 hex digits) pins the file; a branch does not
    sha256: str = ""  # of the file at ``revision``; without one it is not downloaded

    @property
    def url_path(self) -> str:
        return f"{self.repo}/resolve/{self.revision}/{self.filename}"

    @property
    def pinned(self) -> bool:
        """At a fixed commit, so the file cannot change under the recorded hash."""
        return _COMMIT.fullmatch(self.revision) is not None


@dataclass(frozen=True)
class CatalogPair:
    name: str
    description: str
    target: CatalogFile
    draft: CatalogFile
    verified: bool  # checked end to end (downloaded, paired, measured) by the developers
    note: str = ""


def catalog_path() -> Path:
    env = os.environ.get(CATALOG_ENV)
    if env:
        return Path(env)
    for candidate in _CANDIDATES:
        if candidate.is_file():
            return candidate
    return _CANDIDATES[0]


def load_catalog(path: str | os.PathLike[str] | None = None) -> list[CatalogPair]:
    p = Path(path) if path else catalog_path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        return [_pair(raw) for raw in data["pairs"]]
    except FileNotFoundError as exc:
        raise GambitError(f"the model catalog is missing: {p}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise GambitError(f"the model catalog is damaged ({exc}): {p}") from exc


def find_pair(name: str, pairs: Sequence[CatalogPair] | None = None) -> CatalogPair:
    pairs = load_catalog() if pairs is None else pairs
    for pair in pairs:
        if pair.name.lower() == name.lower():
            return pair
    known = ", ".join(p.name for p in pairs)
    raise GambitError(f"no catalog entry named {name!r}; known: {known}")


def _file(raw: dict[str, Any]) -> CatalogFile:
    sha256 = str(raw.get("sha256", "")).lower()
    if sha256 and not is_sha256(sha256):
        raise ValueError(f"{raw['filename']}: sha256 is not 64 hexadecimal digits")
    return CatalogFile(
        repo=str(raw["repo"]),
        filename=str(raw["filename"]),
        size_mb=int(raw["size_mb"]),
        params=str(raw.get("params", "")),
        revision=str(raw.get("revision", "main")),
        sha256=sha256,
    )


def _pair(raw: dict[str, Any]) -> CatalogPair:
    return CatalogPair(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        target=_file(raw["target"]),
        draft=_file(raw["draft"]),
        verified=bool(raw.get("verified", False)),
        note=str(raw.get("note", "")),
    )


class _ProgressBar:
    """Stands in for tqdm in ``hf_hub_download(tqdm_class=...)``: forwards byte
    counts to a Gambit progress callback."""

    def __init__(self, progress: Progress, stage: str, **kwargs: Any) -> None:
        self._progress = progress
        self._stage = stage
        self.total = int(kwargs.get("total") or 0)
        self.n = int(kwargs.get("initial") or 0)
        progress(stage, self.n, self.total)

    def update(self, n: int | float = 1) -> None:
        self.n += int(n)
        self._progress(self._stage, self.n, self.total)

    def close(self) -> None:
        pass

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bar_class(progress: Progress, stage: str) -> type[_ProgressBar]:
    class Bar(_ProgressBar):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(progress, stage, **kwargs)

    return Bar


def download_file(
    item: CatalogFile,
    dest_dir: Path,
    progress: Progress | None = None,
    endpoint: str | None = None,
) -> Path:
    """Download one catalog file into ``dest_dir`` and check it against its
    recorded SHA-256: a file that does not match is deleted and the error says
    so. A file with no recorded hash is refused before anything is fetched."""
    if not item.sha256:
        raise GambitError(
            f"{item.filename} has no recorded SHA-256 in the catalog, so Gambit does not "
            f"download it (it could not check what arrives). Download it yourself from "
            f"{item.repo} on Hugging Face and add it with `gambit-cli models import PATH` "
            "(or Import… on the Models page)."
        )
    path = _fetch(item, dest_dir, progress, endpoint)
    source = f"from {item.repo} at revision {item.revision[:12]}"
    try:
        verify_sha256(path, item.sha256, progress, source)
    except GambitError:
        # huggingface_hub's record of the finished file goes too: the next try downloads
        # the file afresh instead of trusting what was deleted.
        (dest_dir / ".cache" / "huggingface" / "download" / f"{item.filename}.metadata").unlink(
            missing_ok=True
        )
        raise
    check_model_file(path)
    return path


def _fetch(
    item: CatalogFile, dest_dir: Path, progress: Progress | None, endpoint: str | None
) -> Path:
    """``hf_hub_download`` into ``dest_dir``, its errors told in plain words."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    where = endpoint or "https://huggingface.co"
    dest_dir.mkdir(parents=True, exist_ok=True)
    check_disk_space(dest_dir, item.size_mb * 1_000_000, item.filename)
    stage = f"downloading {item.filename}"
    why = (
        "offline mode is on (HF_HUB_OFFLINE)"
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        else f"{where} cannot be reached (no network connection, or a proxy or firewall in the way)"
    )
    offline = (
        f"cannot download {item.filename}: {why}. Download the file on another "
        f"machine from {where}/{item.url_path} and add it with "
        "`gambit-cli models import PATH` (or Import… on the Models page)."
    )
    kwargs: dict[str, Any] = {}
    if progress is not None:
        kwargs["tqdm_class"] = _bar_class(progress, stage)
    try:
        # One quick HEAD first: hf_hub_download retries an unreachable host with
        # back-off for ~20 s before giving up; offline should be said at once.
        url = hf_hub_url(item.repo, item.filename, revision=item.revision, endpoint=endpoint)
        meta = get_hf_file_metadata(url, timeout=METADATA_TIMEOUT_S)
        _refuse_another_file(item, meta.etag)
        local = hf_hub_download(
            repo_id=item.repo,
            filename=item.filename,
            revision=item.revision,
            local_dir=dest_dir,
            endpoint=endpoint,
            **kwargs,
        )
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:
        raise GambitError(offline) from exc
    except GatedRepoError as exc:
        raise GambitError(
            f"{item.repo} is gated on Hugging Face: accept its license there and log in "
            "(`hf auth login`), or download the file yourself and import it"
        ) from exc
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as exc:
        raise GambitError(
            f"{item.url_path} was not found on {where}; the catalog entry may be out of date"
        ) from exc
    except HfHubHTTPError as exc:
        raise GambitError(f"downloading {item.filename} from {where} failed: {exc}") from exc
    except OSError as exc:
        if _is_network_error(exc):
            raise GambitError(offline) from exc
        raise GambitError(f"downloading {item.filename} failed: {exc}") from exc
    except Exception as exc:
        # httpx's transport errors are not OSErrors; anything network-shaped is "offline".
        if _is_network_error(exc):
            raise GambitError(offline) from exc
        raise
    return Path(local)


def _refuse_another_file(item: CatalogFile, etag: str | None) -> None:
    """The Hub names a large file by its SHA-256 (its ETag): when that is not the
    recorded one, say so before gigabytes are fetched only to be deleted."""
    served = (etag or "").strip('"').removeprefix("W/").strip('"').lower()
    if is_sha256(served) and served != item.sha256:
        raise GambitError(
            f"{item.url_path} on the server is not the file the catalog recorded (its "
            f"SHA-256 is {served[:12]}…, the catalog's {item.sha256[:12]}…); nothing was "
            "downloaded. The catalog entry may be out of date."
        )


def _is_network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(
        names
        & {
            "ConnectError",
            "ConnectionError",
            "ConnectTimeout",
            "TimeoutException",
            "NetworkError",
            "ProxyError",
            "RemoteProtocolError",
        }
    )


def download(
    entry: CatalogPair,
    progress: Progress | None = None,
    dest_dir: str | os.PathLike[str] | None = None,
    which: Which = "both",
    library: ModelLibrary | None = None,
    endpoint: str | None = None,
) -> list[Path]:
    """Download a catalog pair (or one side of it) and add it to the library,
    the draft registered as the target's draft."""
    library = library or ModelLibrary()
    folder = Path(dest_dir) if dest_dir else library.models_dir
    items = {"target": [entry.target], "draft": [entry.draft]}.get(
        which, [entry.target, entry.draft]
    )
    paths = [download_file(item, folder, progress, endpoint) for item in items]
    for path in paths:
        library.add_file(path, origin="downloaded")
    if which == "both":
        library.register_draft(paths[0], paths[1], origin="downloaded")
    return paths
