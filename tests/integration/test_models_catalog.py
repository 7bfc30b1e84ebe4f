"""The catalog of known pairs, and downloads through huggingface_hub.

Hugging Face cannot be reached from here, so the download path is tested
against a Hub-shaped HTTP server started by the test on 127.0.0.1
(``HF_ENDPOINT`` pointing at it): ``HEAD``/``GET`` on
``/{repo}/resolve/{revision}/{filename}`` answering with the headers
``hf_hub_download`` relies on (``X-Repo-Commit``, ``ETag``,
``Content-Length``) and honouring ``Range`` for resumed transfers. The files
served are small GGUF models written with the gguf package.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import pytest

from gambit.errors import GambitError
from gambit.formats.gguf_info import inspect_model
from gambit.models.catalog import CatalogFile, CatalogPair, download, find_pair, load_catalog
from gambit.models.checksum import ChecksumError
from gambit.models.library import ModelLibrary

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _tiny_gguf(path: Path, n_embd: int) -> bytes:
    """A small llama-architecture GGUF (no usable weights, a real header)."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(path.stem)
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(2 * n_embd)
    writer.add_head_count(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(64)])
    writer.add_tensor("token_embd.weight", np.zeros((64, n_embd), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@dataclass
class Hub:
    url: str
    files: dict[str, bytes]
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    drop_first_get: dict[str, int] = field(default_factory=dict)  # path -> bytes sent
    # path -> bytes a GET sends instead of the file (HEAD and ETag still describe the file)
    tamper: dict[str, bytes] = field(default_factory=dict)

    def sha256(self, path: str) -> str:
        return hashlib.sha256(self.files[path]).hexdigest()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    files = {
        "/test/target-GGUF/resolve/main/target.gguf": _tiny_gguf(tmp_path / "t.gguf", 256),
        "/test/draft-GGUF/resolve/main/draft.gguf": _tiny_gguf(tmp_path / "d.gguf", 32),
    }
    state = Hub(url="", files=files)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _headers(self, status: int, data: bytes, length: int) -> None:
            self.send_response(status)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def _lookup(self) -> bytes | None:
            data = files.get(self.path)
            if data is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
            return data

        def do_HEAD(self) -> None:
            state.requests.append(("HEAD", self.path, None))
            data = self._lookup()
            if data is not None:
                self._headers(200, data, len(data))

        def do_GET(self) -> None:
            rng = self.headers.get("Range")
            state.requests.append(("GET", self.path, rng))
            data = self._lookup()
            if data is None:
                return
            if rng:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                body = data[start:]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self._headers(200, data, len(data))
            data = state.tamper.get(self.path, data)
            if self.path in state.drop_first_get:
                cut = state.drop_first_get.pop(self.path)
                self.wfile.write(data[:cut])  # then the connection drops
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


TARGET = "/test/target-GGUF/resolve/main/target.gguf"
DRAFT = "/test/draft-GGUF/resolve/main/draft.gguf"


def _pair(tmp_path: Path, hub: Hub, target_sha256: str | None = None) -> CatalogPair:
    catalog = {
        "version": 1,
        "pairs": [
            {
                "name": "tiny",
                "description": "two tiny files on the local test hub",
                "target": {"repo": "test/target-GGUF", "filename": "target.gguf",
                           "sha256": hub.sha256(TARGET) if target_sha256 is None
                           else target_sha256,
                           "size_mb": 1, "params": "16K"},
                "draft": {"repo": "test/draft-GGUF", "filename": "draft.gguf",
                          "sha256": hub.sha256(DRAFT), "size_mb": 1, "params": "2K"},
                "verified": False,
            }
        ],
    }  # fmt: skip
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    return find_pair("TINY", load_catalog(path))


@pytest.fixture
def lib(tmp_path: Path) -> ModelLibrary:
    return ModelLibrary(tmp_path / "data" / "library.json", tmp_path / "data" / "models")


def test_the_catalog() -> None:
    pairs = load_catalog()
    assert len(pairs) >= 4
    assert len({p.name for p in pairs}) == len(pairs)
    unpinned = []
    for p in pairs:
        assert not p.verified  # nothing could be downloaded here (models/README.md)
        for f in (p.target, p.draft):
            assert f.repo.count("/") == 1 and f.filename.endswith(".gguf")
            assert f.sha256 == "" or re.fullmatch(r"[0-9a-f]{64}", f.sha256)
            if not (f.pinned and f.sha256):
                unpinned.append(f.filename)
        assert p.draft.size_mb < p.target.size_mb
    # the entries models/README.md lists as not fully pinned, and no others
    assert sorted(unpinned) == [
        "Qwen2.5-0.5B-Instruct-Q8_0.gguf",  # a hash, on "main"
        "google_gemma-3-270m-it-Q8_0.gguf",  # no hash: not downloaded
        "google_gemma-3-4b-it-Q4_K_M.gguf",
    ]
    names = {p.name for p in pairs}
    assert {"qwen2.5-7b", "llama-3.2-3b", "smollm2-1.7b", "gemma-3-4b"} <= names
    with pytest.raises(GambitError, match="no catalog entry named 'nope'"):
        find_pair("nope", pairs)


def test_download_a_pair(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    pair = _pair(tmp_path, hub)
    seen: list[tuple[str, int, int]] = []
    target, draft = download(pair, lambda *a: seen.append(a), library=lib)
    assert target == lib.models_dir / "target.gguf" and draft == lib.models_dir / "draft.gguf"
    assert target.read_bytes() == hub.files[TARGET]
    assert draft.read_bytes() == hub.files[DRAFT]
    for path in (target, draft):
        size = path.stat().st_size
        for stage in (f"downloading {path.name}", f"verifying {path.name}"):
            assert (stage, size, size) in seen
            done = [d for s, d, _ in seen if s == stage]
            assert done == sorted(done)
    # both in the library, the draft registered for the target
    entries = {e.path.name: e for e in lib.entries()}
    assert set(entries) == {"target.gguf", "draft.gguf"}
    assert {e.origin for e in entries.values()} == {"downloaded"}
    assert entries["draft.gguf"].draft_for == (str(target),)
    assert inspect_model(target).embedding_length == 256
    # the Hub's own bookkeeping stays out of the listing
    assert [i.path.name for i in lib.rescan()] == ["draft.gguf", "target.gguf"]
    assert lib.problems() == []
    # downloading again finds the files in place: no new transfer
    gets = sum(1 for r in hub.requests if r[0] == "GET")
    download(pair, library=lib)
    assert sum(1 for r in hub.requests if r[0] == "GET") == gets


def test_download_resumes_after_a_dropped_connection(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection drops 11 MB into a 12.6 MB file; the transfer carries on
    from what was written (huggingface_hub writes in 10 MiB chunks) with a
    range request instead of starting over."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    path = "/test/big-GGUF/resolve/main/big.gguf"
    hub.files[path] = _tiny_gguf(tmp_path / "big.gguf", 49_152)
    hub.drop_first_get[path] = 11_000_000
    item = CatalogFile("test/big-GGUF", "big.gguf", 13, "3M", sha256=hub.sha256(path))
    pair = CatalogPair("big", "", item, item, verified=False)
    (big,) = download(pair, which="target", library=lib)
    assert big.read_bytes() == hub.files[path]
    ranges = [r[2] for r in hub.requests if r[0] == "GET" and r[1] == path]
    assert len(ranges) == 2 and ranges[0] is None, ranges
    match = re.fullmatch(r"bytes=(\d+)-", ranges[1] or "")
    assert match and 0 < int(match.group(1)) <= 11_000_000, ranges


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_says_so(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = _pair(tmp_path, hub)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    t0 = time.perf_counter()
    with pytest.raises(GambitError) as info:
        download(pair, library=lib)
    assert time.perf_counter() - t0 < 120  # a hang guard: retries end in an answer
    message = str(info.value)
    assert "cannot be reached" in message and "no network connection" in message
    assert "gambit-cli models import PATH" in message
    assert "test/target-GGUF/resolve/main/target.gguf" in message  # where to get it by hand
    assert lib.entries() == []
    assert not lib.models_dir.exists() or not list(lib.models_dir.glob("*.gguf"))


def test_missing_file_on_the_hub(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    pair = _pair(tmp_path, hub)
    del hub.files[DRAFT]
    with pytest.raises(GambitError, match="was not found on"):
        download(pair, which="draft", library=lib)
    assert lib.entries() == []


def test_a_file_that_is_not_the_recorded_one_is_deleted(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server says the right hash but sends other bytes: the download is
    checked, refused, deleted, and a later try downloads the file afresh."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    pair = _pair(tmp_path, hub)
    good = hub.files[TARGET]
    hub.tamper[TARGET] = good[:-1] + bytes([good[-1] ^ 0xFF])  # one byte changed
    with pytest.raises(ChecksumError) as info:
        download(pair, which="target", library=lib)
    message = str(info.value)
    assert message.startswith("target.gguf from test/target-GGUF at revision main failed its")
    assert f"expected {hub.sha256(TARGET)[:12]}…" in message and "was deleted" in message
    assert not (lib.models_dir / "target.gguf").exists()
    left = [p.name for p in lib.models_dir.rglob("target.gguf*")]
    assert left == ["target.gguf.lock"], left  # no partial file, no record of the file
    assert lib.entries() == []

    del hub.tamper[TARGET]
    gets = sum(1 for r in hub.requests if r[:2] == ("GET", TARGET))
    (target,) = download(pair, which="target", library=lib)
    assert target.read_bytes() == good
    assert sum(1 for r in hub.requests if r[:2] == ("GET", TARGET)) == gets + 1


def test_a_server_naming_another_file_is_refused_before_downloading(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    pair = _pair(tmp_path, hub, target_sha256="ab" * 32)
    with pytest.raises(GambitError, match="is not the file the catalog recorded") as info:
        download(pair, library=lib)
    assert f"its SHA-256 is {hub.sha256(TARGET)[:12]}…" in str(info.value)
    assert [r for r in hub.requests if r[0] == "GET"] == []  # nothing fetched
    assert lib.entries() == []


def test_an_entry_without_a_hash_is_not_downloaded(
    hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    item = CatalogFile("test/target-GGUF", "target.gguf", 1, "16K")
    pair = CatalogPair("unpinned", "", item, item, verified=False)
    with pytest.raises(GambitError, match="no recorded SHA-256") as info:
        download(pair, which="target", library=lib)
    assert "gambit-cli models import PATH" in str(info.value)
    assert hub.requests == []
    assert lib.entries() == []


def test_a_damaged_hash_in_the_catalog_is_said(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    bad = {"repo": "a/b", "filename": "x.gguf", "size_mb": 1, "sha256": "not-a-digest"}
    path.write_text(json.dumps({"version": 1, "pairs": [
        {"name": "x", "target": bad, "draft": bad}
    ]}))  # fmt: skip
    with pytest.raises(GambitError, match=r"catalog is damaged.*sha256 is not 64 hexadecimal"):
        load_catalog(path)


class _StoppedError(Exception):
    """What the window's task raises from its progress callback after Cancel."""


def test_a_cancelled_download_stops_at_its_next_chunk_and_leaves_nothing(
    tmp_path: Path, hub: Hub, lib: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a cancelled download stops at its next step (a chunk), not at
    its end: counted in the bytes it reported, not timed."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    path = "/test/big-GGUF/resolve/main/big.gguf"
    hub.files[path] = _tiny_gguf(tmp_path / "big.gguf", 49_152)  # 12.6 MB: two chunks
    item = CatalogFile("test/big-GGUF", "big.gguf", 13, "3M", sha256=hub.sha256(path))
    pair = CatalogPair("big", "", item, item, verified=False)
    seen: list[tuple[str, int, int]] = []

    def progress(stage: str, done: int, total: int) -> None:
        seen.append((stage, done, total))
        if done > 0:
            raise _StoppedError(stage)  # Cancel, at the first chunk written

    with pytest.raises(_StoppedError):
        download(pair, progress, which="target", library=lib)
    stage, done, total = seen[-1]
    assert stage == "downloading big.gguf" and 0 < done < total == len(hub.files[path])
    assert not (lib.models_dir / "big.gguf").exists()
    # no partial file either (only the Hub's bookkeeping: locks, its cache tags)
    data = [p for p in lib.models_dir.rglob("*") if p.is_file() and p.stat().st_size > 1000]
    assert data == []
