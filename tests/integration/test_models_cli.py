"""``gambit-cli models ...`` end to end, headless: a subprocess on real files,
with its own data folder (``GAMBIT_HOME``)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from gguf_fixtures import (
    BASE_KVS,
    BASE_TENSORS,
    F32,
    kv_array,
    kv_text,
    kv_u32,
    tensor_info,
    write_raw_gguf,
    write_small_model,
)


def gambit(
    *args: str | Path, home: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "GAMBIT_HOME": str(home), **(env or {})}
    full_env.pop("DISPLAY", None)  # headless
    full_env.pop("WAYLAND_DISPLAY", None)
    return subprocess.run(
        [sys.executable, "-m", "gambit", "models", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=180,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _foreign_gguf(path: Path) -> Path:
    """A small GGUF with an SPM ("llama") tokenizer of 1,000 tokens."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(16)
    writer.add_head_count(2)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<{i}>" for i in range(1000)])
    writer.add_tensor("token_embd.weight", np.zeros((1000, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("gambit-cli: error: ")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_inspect(home: Path, smol_q4_1: Path) -> None:
    proc = gambit("inspect", smol_q4_1, "--ctx", "2048", home=home)
    assert proc.returncode == 0, proc.stderr
    fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in proc.stdout.splitlines())
    assert fields["architecture"] == "llama"
    assert fields["quantization"] == "Q4_1"
    assert fields["parameters"].startswith("134.5M")
    assert fields["blocks"] == "30"
    assert fields["vocabulary"].startswith("49,152 tokens, gpt2 (BPE)")
    assert fields["chat template"] == "yes"
    assert fields["context length"].startswith("8,192")
    assert re.match(r"about \d+ MiB at 2,048 tokens", fields["memory"])

    proc = gambit("inspect", smol_q4_1, "--json", home=home)
    data = json.loads(proc.stdout)
    assert data["n_params"] == 134_515_008 and data["vocab_size"] == 49_152
    assert data["memory"]["total_bytes"] > data["file_size"] * 0.9


def test_pair(home: Path, tmp_path: Path, smol_q8_0: Path, smol_q4_1: Path) -> None:
    proc = gambit("pair", smol_q8_0, smol_q4_1, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "compatible: yes" in proc.stdout

    foreign = _foreign_gguf(tmp_path / "foreign.gguf")
    proc = gambit("pair", smol_q8_0, foreign, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "compatible: yes, through text" in proc.stdout
    assert "different tokenizer types (SPM 'llama' vs BPE 'gpt2')" in proc.stdout
    assert "vocabulary sizes differ by 48,152" in proc.stdout


def test_pair_of_two_families_drafts_through_text(
    home: Path, gemma_q4_k_m: Path, smol_q4_1: Path
) -> None:
    proc = gambit("pair", gemma_q4_k_m, smol_q4_1, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "compatible: yes, through text" in proc.stdout
    assert "the draft drafts through text" in proc.stdout  # and what that costs
    assert "vocabulary sizes differ by 212,992" in proc.stdout


def test_bad_paths_exit_2(home: Path, tmp_path: Path, smol_q4_1: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "the model file is empty" in _error_line(gambit("inspect", empty, home=home))
    line = _error_line(gambit("inspect", tmp_path, home=home))
    assert "this is a folder, not a model file" in line
    line = _error_line(gambit("pair", smol_q4_1, tmp_path / "missing.gguf", home=home))
    assert "model file not found" in line and "missing.gguf" in line
    line = _error_line(gambit("import", empty, home=home))
    assert "empty" in line
    assert "not in the library" in _error_line(gambit("remove", smol_q4_1, home=home))


def test_import_list_remove(home: Path, tmp_path: Path, smol_q4_1: Path, smol_q8_0: Path) -> None:
    proc = gambit("list", home=home)
    assert proc.returncode == 0 and "No models yet" in proc.stdout

    proc = gambit("import", smol_q8_0, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "added to the library (referenced)" in proc.stdout

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "draft.gguf").symlink_to(smol_q4_1)
    (folder / "cut.gguf").write_bytes(smol_q4_1.read_bytes()[:5000])
    proc = gambit("list", "--folder", folder, home=home)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:4] == ["FILE", "ARCH", "PARAMS", "QUANT"]
    rows = {line.split()[0]: line for line in lines[1:3]}
    assert set(rows) == {smol_q8_0.name, smol_q4_1.name}
    assert "Q8_0" in rows[smol_q8_0.name] and "referenced" in rows[smol_q8_0.name]
    assert "1 file(s) cannot be used:" in proc.stdout
    assert "truncated" in proc.stdout and "cut.gguf" in proc.stdout
    assert f"added folder:  {folder}" in proc.stdout

    # importing the target again names the drafts the library has for it
    proc = gambit("import", smol_q8_0, home=home)
    assert f"suggested: {smol_q4_1.name}" in proc.stdout

    proc = gambit("remove", smol_q8_0, "--delete-file", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "the file was left in place" in proc.stdout  # not Gambit's to delete
    assert smol_q8_0.is_file()
    proc = gambit("list", home=home)
    assert smol_q8_0.name not in proc.stdout and smol_q4_1.name in proc.stdout


def test_derive_with_measure(home: Path, smol_q8_0: Path) -> None:
    proc = gambit("derive", smol_q8_0, "--type", "Q4_0", "--measure", "--threads", "2", home=home)
    assert proc.returncode == 0, proc.stderr
    out = home / "data" / "models" / "SmolLM2-135M-Instruct.Q4_0.gguf"
    match = re.search(r"derived (.+) \(Q4_0, ([\d.]+) MB\) in ([\d.]+) s", proc.stdout)
    assert match and Path(match.group(1)) == out, proc.stdout
    assert f"registered as a draft for {smol_q8_0.name}" in proc.stdout
    rate = re.search(r"acceptance: ([\d.]+)%", proc.stdout)
    assert rate and 20 < float(rate.group(1)) <= 100, proc.stdout
    assert "quantizing 100%" in proc.stderr  # progress, one line per quarter off a terminal
    proc = gambit("list", home=home)
    row = next(line for line in proc.stdout.splitlines() if line.startswith(out.name))
    assert "derived" in row and smol_q8_0.name in row
    proc = gambit("pair", smol_q8_0, out, home=home)
    assert proc.returncode == 0 and "compatible: yes" in proc.stdout


def test_derive_interrupted(home: Path, smol_f16: Path) -> None:
    models = home / "data" / "models"
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gambit", "models", "derive", smol_f16, "--type", "Q3_K_M"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if models.is_dir() and list(models.glob(".*.part")):
            break  # the quantizer is writing
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "cancelled" in err
    assert not models.is_dir() or list(models.iterdir()) == []


def test_catalog_and_offline_download(home: Path) -> None:
    proc = gambit("catalog", home=home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["NAME", "TARGET", "DRAFT", "VERIFIED"]
    assert "qwen2.5-7b" in proc.stdout and "bartowski/Qwen2.5-0.5B-Instruct-GGUF" in proc.stdout

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = gambit(
        "download", "smollm2-1.7b", home=home, env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"}
    )
    line = _error_line(proc)
    assert "cannot be reached" in line and "gambit-cli models import PATH" in line
    assert "no catalog entry named 'nope'" in _error_line(gambit("download", "nope", home=home))


# ---------------------------------------------------------------- bad files, bad index


def test_damaged_files_in_the_models_folder_are_listed_apart(home: Path) -> None:
    models = home / "data" / "models"
    models.mkdir(parents=True)
    good = write_small_model(models / "good.gguf")
    damaged = {
        "alignment-0.gguf": ((*BASE_KVS, kv_u32("general.alignment", 0)), BASE_TENSORS),
        "alignment-text.gguf": ((*BASE_KVS, kv_text("general.alignment", "32")), BASE_TENSORS),
        "huge-list.gguf": (
            (*BASE_KVS, kv_array("tokenizer.ggml.scores", F32, 1 << 61)),
            BASE_TENSORS,
        ),
        "weight-type-99.gguf": (BASE_KVS, (tensor_info("token_embd.weight", (16, 4), 99),)),
        "blocks-as-text.gguf": (
            (*BASE_KVS[:2], kv_text("llama.block_count", "12"), *BASE_KVS[3:]),
            BASE_TENSORS,
        ),
    }
    for name, (kvs, tensors) in damaged.items():
        write_raw_gguf(models / name, kvs, tensors)

    proc = gambit("list", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = [line.split()[0] for line in proc.stdout.splitlines()[1:] if line.strip()]
    assert rows[0] == good.name  # the good model is listed
    assert f"{len(damaged)} file(s) cannot be used:" in proc.stdout
    reasons = {
        "alignment-0.gguf": "general.alignment is 0, not a power of 2",
        "alignment-text.gguf": "general.alignment should be a uint32, not string",
        "huge-list.gguf": "tokenizer.ggml.scores claims 2,305,843,009,213,693,952 elements",
        "weight-type-99.gguf": "token_embd.weight has the unknown weight type 99",
        "blocks-as-text.gguf": "llama.block_count should be a whole number",
    }
    problems = proc.stdout.split("cannot be used:")[1]
    for name, reason in reasons.items():
        [line] = [ln for ln in problems.splitlines() if ln.endswith(str(models / name))]
        assert "the GGUF header is damaged" in line and reason in line, line
    # the same files, one at a time: exit 2 and one line each
    for name, reason in reasons.items():
        assert reason in _error_line(gambit("inspect", models / name, home=home))
        assert reason in _error_line(gambit("import", models / name, home=home))


@pytest.mark.parametrize("content", ["[" * 100_000, '{"entries": {"a": 5}}', '{"entries": []}'])
def test_damaged_library_index_is_set_aside(home: Path, tmp_path: Path, content: str) -> None:
    index = home / "data" / "library.json"
    index.parent.mkdir(parents=True)
    index.write_text(content)
    model = write_small_model(tmp_path / "small.gguf")
    proc = gambit("list", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    [aside] = index.parent.glob("library.json.corrupt-*")
    assert aside.read_text() == content
    [warning] = [ln for ln in proc.stderr.splitlines() if ln.startswith("gambit-cli: warning:")]
    assert "library index" in warning and "damaged" in warning and aside.name in warning
    assert "No models yet" in proc.stdout
    # and it works again
    assert gambit("import", model, home=home).returncode == 0
    proc = gambit("list", home=home)
    assert model.name in proc.stdout and proc.stderr == ""


def test_copy_of_a_file_already_in_the_models_folder_is_never_deleted(home: Path) -> None:
    # The user's only copy of a model, put into the models folder by hand.
    models = home / "data" / "models"
    models.mkdir(parents=True)
    mine = write_small_model(models / "mine.gguf")
    content = mine.read_bytes()
    assert gambit("list", home=home).returncode == 0

    proc = gambit("import", "--copy", mine, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "already in the models folder" in proc.stdout
    assert "folder" in gambit("list", home=home).stdout.splitlines()[1].split()

    proc = gambit("remove", "--delete-file", mine, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "the file was left in place" in proc.stdout
    assert mine.read_bytes() == content


def test_copy_gambit_made_is_deleted_on_request(home: Path, tmp_path: Path) -> None:
    original = write_small_model(tmp_path / "original.gguf")
    proc = gambit("import", "--copy", original, home=home)
    assert proc.returncode == 0, proc.stderr
    assert "copied into the library" in proc.stdout
    copy = home / "data" / "models" / original.name
    assert copy.is_file()
    proc = gambit("remove", "--delete-file", copy, home=home)
    assert proc.returncode == 0, proc.stderr
    assert f"deleted: {copy}" in proc.stdout
    assert not copy.exists() and original.is_file()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["derive", "x.gguf", "--type", "Q8_0", "--threads", "-1"], "--threads"),
        (["layerskip", "x.gguf", "--threads", "-2"], "--threads"),
        (["layerskip", "x.gguf", "--threads", "600"], "--threads"),
        (["layerskip", "x.gguf", "--max-evals", "0"], "--max-evals"),
    ],
)
def test_bad_counts_are_refused_before_anything_runs(
    home: Path, args: list[str], option: str
) -> None:
    proc = gambit(*args, home=home)
    assert proc.returncode == 2
    assert f"error: argument {option}: must be " in proc.stderr
    assert "Traceback" not in proc.stderr
