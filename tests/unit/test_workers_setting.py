"""The workers setting: the addresses of ``gambit-worker``s that hold the target's
layers, and how many layers they hold; checked, saved, and passed to the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.storage.settings import RELOADS, Settings, SettingsStore

RULE = "Workers must each be host:port (e.g. 127.0.0.1:50052), not {!r}."


def test_no_workers_by_default() -> None:
    s = Settings()
    assert (s.rpc_workers, s.worker_layers) == ((), 0)
    assert s.target_options().rpc_workers == ()
    assert {"rpc_workers", "worker_layers"} <= RELOADS


def test_workers_reach_the_target_and_never_the_draft(tmp_path: Path) -> None:
    s = Settings(
        rpc_workers=("127.0.0.1:50052", "10.0.0.2:6000"),
        worker_layers=12,
        gpu_layers_target=-1,  # not the workers' count
        gpu_layers_draft=3,
        drafter="draft",
        draft_model=str(tmp_path / "d.gguf"),
    )
    config = s.engine_config(tmp_path / "t.gguf")
    assert config.target_options == RuntimeOptions(
        n_gpu_layers=12, rpc_workers=("127.0.0.1:50052", "10.0.0.2:6000")
    )
    assert config.draft_options == RuntimeOptions(n_gpu_layers=3)


def test_zero_worker_layers_puts_every_layer_on_the_workers() -> None:
    options = Settings(rpc_workers=("127.0.0.1:50052",)).target_options()
    assert (options.n_gpu_layers, options.rpc_workers) == (-1, ("127.0.0.1:50052",))
    # without workers, the count is not used: the GPU layers decide
    assert Settings(worker_layers=7, gpu_layers_target=2).target_options().n_gpu_layers == 2


def test_addresses_are_normalised_once_each() -> None:
    s = Settings(rpc_workers=(" 127.0.0.1 ", "127.0.0.1:50052", "lan-box:7000"))
    assert s.validate() == []
    assert s.target_options().rpc_workers == ("127.0.0.1:50052", "lan-box:7000")


@pytest.mark.parametrize("bad", ["", "host:port", "a b:1", "h:0", "h:70000", ":50052"])
def test_a_bad_address_is_a_problem_that_names_it(bad: str) -> None:
    s = Settings(rpc_workers=("127.0.0.1:50052", bad))
    assert s.validate() == [RULE.format(bad)]


def test_worker_layers_must_not_be_negative() -> None:
    assert Settings(worker_layers=-1).validate() == ["Worker layers must be 0 (all) or more."]


def test_workers_round_trip_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    s = Settings(rpc_workers=("127.0.0.1:50052", "lan-box:50053"), worker_layers=20)
    store = SettingsStore(path)
    store.save(s)
    assert json.loads(path.read_text(encoding="utf-8"))["rpc_workers"] == [
        "127.0.0.1:50052",
        "lan-box:50053",
    ]
    assert store.load() == s
    assert store.load_errors == []


@pytest.mark.parametrize(
    ("written", "error"),
    [
        ("127.0.0.1:50052", 'Workers: expected a list of texts in settings.json, found '
                            '"127.0.0.1:50052"; using the default ([]).'),
        (["127.0.0.1:50052", 5], "Workers: expected a list of texts in settings.json, found "
                                 '["127.0.0.1:50052", 5]; using the default ([]).'),
        (["no port:x"], "Workers must each be host:port (e.g. 127.0.0.1:50052), not "
                        "'no port:x' in settings.json; using the default ([])."),
    ],
)  # fmt: skip
def test_a_bad_workers_entry_in_the_file_is_dropped_with_a_message(
    tmp_path: Path, written: object, error: str
) -> None:
    # An address llama.cpp cannot connect to aborts the process that tries:
    # such a list never loads, and the rest of the file is kept.
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"rpc_workers": written, "seed": 7}), encoding="utf-8")
    store = SettingsStore(path)
    assert store.load() == Settings(seed=7)
    assert store.load_errors == [error]
