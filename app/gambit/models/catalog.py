"""Known pairs of a target and a draft model, and downloading them from Hugging Face.

The catalog is ``models/catalog.json`` at the top of the project (see
``models/README.md``). Downloads go through ``huggingface_hub.hf_hub_download``
into the models folder, so its endpoint (``HF_ENDPOINT``), proxy, token and
offline settings apply, and an interrupted transfer is resumed with HTTP range
requests. Without network the error says so and points to importing a file
obtained some other way.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gambit.errors import GambitError
from gambit.models.default_model import Progress
from gambit.models.derive import check_disk_space
from gambit.models.gguf_file import check_model_file
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


@dataclass(frozen=True)
class CatalogFile:
    repo: str  # Hugging Face repository, "owner/name"
    filename: str
    size_mb: int  # approximate, for the listing and the disk-space check
    params: str  # "7.6B"
    revision: str = "main"

    @property
    def url_path(self) -> str:
        return f"{self.repo}/resolve/{self.revision}/{self.filename}"


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
    return CatalogFile(
        repo=str(raw["repo"]),
        filename=str(raw["filename"]),
        size_mb=int(raw["size_mb"]),
        params=str(raw.get("params", "")),
        revision=str(raw.get("revision", "main")),
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
    """Download one catalog file into ``dest_dir`` (resuming within the call)."""
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
        get_hf_file_metadata(url, timeout=METADATA_TIMEOUT_S)
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
    path = Path(local)
    check_model_file(path)
    return path


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
