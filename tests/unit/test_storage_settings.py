"""Settings: defaults, validation, engine mapping, and the JSON file."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.storage.settings import LABELS, Settings, SettingsError, SettingsStore

THREADS_MESSAGE = "Threads must be 0 (automatic) or a whole number from 1 to 512, not {}."


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "settings.json"


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")  # validate() only checks that the file is there
    return path


# ---------------------------------------------------------------- the dataclass
def test_defaults_table() -> None:
    s = Settings()
    assert s.target_model == "" and s.target_path() is None
    assert (s.drafter, s.draft_model, s.speculation) == ("lookup", "", True)
    assert (s.policy, s.fixed_gamma, s.gamma_max) == ("adaptive", 4, 16)
    assert (s.tree_drafts, s.tree_nodes) == (False, 8)
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.7, 40, 0.95, 0.05)
    assert (s.repeat_penalty, s.seed, s.max_tokens, s.system_prompt) == (1.0, -1, 512, "")
    assert (s.threads, s.gpu_layers_target, s.gpu_layers_draft) == (0, 0, 0)
    assert (s.context_size, s.exact_kernels) == (4096, True)
    assert (s.highlight_drafted, s.show_stats) == (True, True)


def test_every_setting_has_a_label() -> None:
    assert set(LABELS) == {f.name for f in dataclasses.fields(Settings)}


def test_frozen_and_with() -> None:
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.temperature = 0.1  # type: ignore[misc]
    t = s.with_(temperature=0.2, seed=7)
    assert (t.temperature, t.seed) == (0.2, 7)
    assert s.temperature == 0.7  # unchanged
    with pytest.raises(TypeError):
        s.with_(no_such_setting=1)


def test_defaults_validate() -> None:
    assert Settings().validate() == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"temperature": -0.1}, "Temperature must be 0 or more."),
        ({"temperature": math.nan}, "Temperature must be a finite number."),
        ({"top_k": -1}, "Top-k must be 0 (off) or more."),
        ({"top_p": 0.0}, "Top-p must be more than 0 and at most 1."),
        ({"top_p": 1.5}, "Top-p must be more than 0 and at most 1."),
        ({"min_p": 1.0}, "Min-p must be 0 or more and less than 1."),
        ({"min_p": -0.5}, "Min-p must be 0 or more and less than 1."),
        ({"repeat_penalty": 0.0}, "Repeat penalty must be more than 0."),
        ({"seed": -2}, "Seed must be -1 (random) or a number 0 or more."),
        ({"max_tokens": 0}, "Max tokens must be between 1 and 32768."),
        ({"max_tokens": 40000}, "Max tokens must be between 1 and 32768."),
        ({"max_tokens": 4096}, "Max tokens (4096) must be less than the context size (4096)."),
        ({"threads": -1}, THREADS_MESSAGE.format(-1)),
        ({"threads": 513}, THREADS_MESSAGE.format(513)),
        ({"gpu_layers_target": -2}, "GPU layers (target) must be -1 (all), 0 (none) or more."),
        ({"gpu_layers_draft": -2}, "GPU layers (draft) must be -1 (all), 0 (none) or more."),
        ({"context_size": 128}, "Context size must be between 256 and 131072 tokens."),
        ({"context_size": 200000}, "Context size must be between 256 and 131072 tokens."),
        ({"fixed_gamma": 0}, "Fixed γ must be between 1 and max γ (16)."),
        ({"fixed_gamma": 9, "gamma_max": 8}, "Fixed γ must be between 1 and max γ (8)."),
        ({"gamma_max": 3}, "Fixed γ must be between 1 and max γ (3)."),
        ({"gamma_max": 0, "fixed_gamma": 0}, "Max γ must be between 1 and 16."),
        ({"drafter": "draft"}, "Draft model: choose a file when the drafter is 'draft model'."),
        (
            {"drafter": "magic"},
            "Drafter must be one of 'none', 'draft', 'lookup', 'draft+lookup', 'layerskip'.",
        ),
        ({"tree_nodes": 1}, "Tree nodes must be between 2 and 16."),
        ({"tree_nodes": 17}, "Tree nodes must be between 2 and 16."),
        ({"policy": "off"}, "γ policy must be one of 'adaptive', 'fixed'."),
    ],
)
def test_validate_names_the_problem(changes: dict[str, object], message: str) -> None:
    assert message in Settings().with_(**changes).validate()


def test_validate_reports_every_problem() -> None:
    bad = Settings(temperature=-1, top_k=-1, threads=-3, context_size=10)
    problems = bad.validate()
    assert len(problems) == 4
    assert all(p.endswith(".") for p in problems)


def test_validate_model_files(tmp_path: Path, model_file: Path) -> None:
    missing = tmp_path / "nowhere" / "big.gguf"
    assert Settings(target_model=str(missing)).validate() == [
        f"Target model file not found: {missing}"
    ]
    assert Settings(target_model=str(model_file)).validate() == []
    assert Settings(target_model=str(tmp_path)).validate() == [
        f"Target model is not a file: {tmp_path}"
    ]

    draft = Settings(drafter="draft", draft_model=str(missing))
    assert draft.validate() == [f"Draft model file not found: {missing}"]
    assert draft.with_(draft_model=str(model_file)).validate() == []
    # A draft model path is only checked when a draft model is the drafter
    assert draft.with_(drafter="lookup").validate() == []


# -------------------------------------------------------------- engine mapping
def test_engine_config_lookup_defaults(model_file: Path) -> None:
    config = Settings().engine_config(model_file)
    assert config.target == model_file
    assert config.drafter == "lookup"
    assert config.draft is None
    assert config.target_options == RuntimeOptions(
        n_ctx=4096, n_threads=0, n_gpu_layers=0, strict_batch_invariance=True
    )
    assert (config.policy, config.gamma, config.gamma_max) == ("adaptive", 4, 16)


def test_engine_config_draft_model(model_file: Path, tmp_path: Path) -> None:
    draft = tmp_path / "models" / "draft.gguf"
    s = Settings(
        drafter="draft",
        draft_model=str(draft),
        speculation=False,  # the drafter still loads; the engine's switch pauses it
        policy="fixed",
        fixed_gamma=3,
        gamma_max=6,
        threads=2,
        gpu_layers_target=-1,
        gpu_layers_draft=10,
        context_size=2048,
        exact_kernels=False,
    )
    config = s.engine_config(model_file)
    assert (config.drafter, config.draft) == ("draft", draft)
    assert config.target_options == RuntimeOptions(
        n_ctx=2048, n_threads=2, n_gpu_layers=-1, strict_batch_invariance=False
    )
    assert config.draft_options == RuntimeOptions(
        n_ctx=2048, n_threads=2, n_gpu_layers=10, strict_batch_invariance=False
    )
    assert (config.policy, config.gamma, config.gamma_max) == ("fixed", 3, 6)


def test_engine_config_no_drafter(model_file: Path) -> None:
    config = Settings(drafter="none", draft_model="/left/over.gguf").engine_config(model_file)
    assert (config.drafter, config.draft) == ("none", None)
    assert config.tree is False


def test_engine_config_layer_skip_takes_the_draft_the_worker_found(
    model_file: Path, tmp_path: Path
) -> None:
    s = Settings(drafter="layerskip", draft_model="/left/over.gguf", gpu_layers_draft=5)
    assert s.validate() == []  # no draft file to choose: the worker finds or measures it
    assert s.draft_path() is None
    found = tmp_path / "model.layerskip.gguf"
    config = s.engine_config(model_file, layer_skip_draft=found)
    assert (config.drafter, config.draft) == ("layerskip", found)
    assert config.draft_options is not None and config.draft_options.n_gpu_layers == 5
    assert config.target_options == s.target_options()
    # only the layer-skip drafter uses it
    assert Settings(drafter="lookup").engine_config(model_file, found).draft is None


@pytest.mark.parametrize("drafter", ["draft", "layerskip", "lookup"])
def test_engine_config_tree_drafts(model_file: Path, drafter: str) -> None:
    s = Settings(drafter=drafter, draft_model=str(model_file))  # type: ignore[arg-type]
    chain = s.engine_config(model_file)
    assert (chain.tree, chain.tree_nodes) == (False, 8)
    tree = s.with_(tree_drafts=True, tree_nodes=12).engine_config(model_file)
    assert (tree.tree, tree.tree_nodes) == (True, 12)


def test_engine_config_no_tree_without_a_drafter(model_file: Path) -> None:
    # the setting is kept for when a drafter is chosen again, but not asked of the engine
    s = Settings(drafter="none", tree_drafts=True, tree_nodes=4)
    assert s.validate() == []
    assert s.engine_config(model_file).tree is False


def test_generation_config() -> None:
    config = Settings().generation_config()
    assert config.max_tokens == 512
    sp = config.sampling
    assert (sp.temperature, sp.top_k, sp.top_p, sp.min_p) == (0.7, 40, 0.95, 0.05)
    assert (sp.repeat_penalty, sp.seed) == (1.0, None)  # -1: random

    custom = Settings(temperature=0, seed=1234, max_tokens=64, repeat_penalty=1.1)
    config = custom.generation_config()
    assert config.max_tokens == 64
    assert config.sampling.greedy
    assert config.sampling.seed == 1234
    assert config.sampling.repeat_penalty == 1.1
    assert Settings(seed=0).generation_config().sampling.seed == 0


# -------------------------------------------------------------------- the file
def test_missing_file_gives_defaults(settings_path: Path) -> None:
    store = SettingsStore(settings_path)
    assert store.load() == Settings()
    assert store.load_errors == []
    assert not settings_path.exists()  # loading writes nothing


def test_round_trip(settings_path: Path) -> None:
    changed = Settings(
        target_model="/models/täst.gguf",
        drafter="draft",
        draft_model="/models/small.gguf",
        speculation=False,
        policy="fixed",
        fixed_gamma=2,
        temperature=0.0,
        top_p=1.0,
        seed=42,
        system_prompt='Answer in "French".\nBe brief: γ ✓',
        gpu_layers_target=-1,
        exact_kernels=False,
        show_stats=False,
    )
    store = SettingsStore(settings_path)
    store.save(changed)  # creates the folder
    loaded = SettingsStore(settings_path).load()
    assert loaded == changed
    assert isinstance(loaded.temperature, float)
    data = json.loads(settings_path.read_text(encoding="utf-8"))
    assert data["drafter"] == "draft" and data["seed"] == 42

    trees = Settings(drafter="layerskip", tree_drafts=True, tree_nodes=5)
    store.save(trees)
    assert store.load() == trees
    assert store.load_errors == []

    store.save(Settings())  # overwrite
    assert store.load() == Settings()
    assert store.load_errors == []


def test_save_is_atomic_and_leaves_no_temp_files(settings_path: Path) -> None:
    store = SettingsStore(settings_path)
    for seed in range(5):
        store.save(Settings(seed=seed))
    assert sorted(p.name for p in settings_path.parent.iterdir()) == ["settings.json"]
    assert store.load().seed == 4


def test_failed_save_keeps_old_file_and_cleans_up(settings_path: Path) -> None:
    store = SettingsStore(settings_path)
    store.save(Settings(seed=1))
    before = settings_path.read_bytes()
    # json cannot write this value: the failure comes after the temp file would
    # be made in a careless implementation, and must leave the old file alone
    with pytest.raises(TypeError):
        store.save(Settings(seed=object()))  # type: ignore[arg-type]
    assert settings_path.read_bytes() == before
    assert sorted(p.name for p in settings_path.parent.iterdir()) == ["settings.json"]


def test_save_into_unusable_folder_raises_settings_error(tmp_path: Path) -> None:
    blocker = tmp_path / "config"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(SettingsError, match="Could not save"):
        SettingsStore(blocker / "settings.json").save(Settings())


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b"[1, 2, 3]",
        b'"just a string"',
        b"\xff\xfe\x00garbage",
        b"[" * 100_000,  # deeper than Python's recursion limit
        b'{"threads": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["not-json", "empty", "list", "string", "not-utf8", "deep", "deep-value"],
)
def test_corrupt_file_gives_defaults_and_keeps_bad_copy(
    settings_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    settings_path.parent.mkdir(parents=True)
    settings_path.write_bytes(content)
    store = SettingsStore(settings_path)
    assert store.load() == Settings()
    [error] = store.load_errors
    [bad] = settings_path.parent.glob("settings.json.corrupt-*")
    assert re.fullmatch(r"settings\.json\.corrupt-\d{8}-\d{6}", bad.name)
    assert "damaged" in error and bad.name in error
    assert bad.read_bytes() == content
    assert not settings_path.exists()
    assert error in caplog.text  # in the log too

    # the next save starts a fresh file; the next load is clean again
    store.save(Settings(seed=3))
    assert store.load() == Settings(seed=3)
    assert store.load_errors == []


def test_unreadable_file_gives_defaults(settings_path: Path) -> None:
    settings_path.mkdir(parents=True)  # a folder where the file should be
    store = SettingsStore(settings_path)
    assert store.load() == Settings()
    [error] = store.load_errors
    assert "Could not read" in error


def test_wrong_types_fall_back_per_field(settings_path: Path) -> None:
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(
        json.dumps(
            {
                "temperature": "hot",  # wrong: text for a number
                "top_k": True,  # wrong: a bool is not a number here
                "speculation": 1,  # wrong: a number is not a bool
                "drafter": "telepathy",  # wrong: not a choice
                "system_prompt": ["a", "list"],  # wrong
                "seed": 7,  # right
                "fixed_gamma": 2.0,  # an integral float is accepted for an int
                "top_p": 1,  # an int is accepted for a float
                "max_tokens": 1.5,  # wrong: not a whole number
                "repeat_penalty": 10**400,  # wrong: too big for a float
                "from_the_future": 123,  # unknown: ignored
            }
        ),
        encoding="utf-8",
    )
    store = SettingsStore(settings_path)
    s = store.load()
    defaults = Settings()
    assert s == defaults.with_(seed=7, fixed_gamma=2, top_p=1.0)
    assert isinstance(s.fixed_gamma, int) and isinstance(s.top_p, float)
    labels = [e.split(":")[0] for e in store.load_errors]
    assert labels == [
        "Drafter",
        "Speculation",
        "Temperature",
        "Top-k",
        "Repeat penalty",
        "Max tokens",
        "System prompt",
    ]  # in the order of the settings
    joined = "\n".join(store.load_errors)
    assert '"hot"' in joined and "using the default (0.7)" in joined
    assert settings_path.exists()  # a readable file is not moved aside
    assert not list(settings_path.parent.glob("settings.json.*"))


def test_a_file_from_before_tree_drafts_loads_cleanly(settings_path: Path) -> None:
    # Written by a Gambit that knew neither trees nor layer skipping.
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(
        json.dumps({"drafter": "lookup", "policy": "fixed", "fixed_gamma": 3, "gamma_max": 8}),
        encoding="utf-8",
    )
    store = SettingsStore(settings_path)
    s = store.load()
    assert store.load_errors == []
    assert s == Settings(policy="fixed", fixed_gamma=3, gamma_max=8)
    assert (s.tree_drafts, s.tree_nodes) == (False, 8)


def test_bad_tree_values_fall_back_or_get_reported(settings_path: Path) -> None:
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text('{"tree_drafts": "yes", "tree_nodes": 40}', encoding="utf-8")
    store = SettingsStore(settings_path)
    s = store.load()
    assert [e.split(":")[0] for e in store.load_errors] == ["Tree drafts"]
    assert (s.tree_drafts, s.tree_nodes) == (False, 40)  # a whole number: validate's business
    assert s.validate() == ["Tree nodes must be between 2 and 16."]


def test_values_of_the_right_type_load_even_if_invalid(settings_path: Path) -> None:
    # Range problems are validate()'s business: the dialog shows them next to
    # the value, rather than silently replacing what the user typed.
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text('{"temperature": -1.0}', encoding="utf-8")
    s = SettingsStore(settings_path).load()
    assert s.temperature == -1.0
    assert s.validate() == ["Temperature must be 0 or more."]


def test_a_second_damaged_file_does_not_replace_the_first(settings_path: Path) -> None:
    settings_path.parent.mkdir(parents=True)
    for content in (b"{first", b"{second"):
        settings_path.write_bytes(content)
        assert SettingsStore(settings_path).load() == Settings()
    kept = sorted(p.read_bytes() for p in settings_path.parent.glob("settings.json.corrupt-*"))
    assert kept == [b"{first", b"{second"]


@pytest.mark.parametrize("threads", [-3, -1, 513, 10**6])
def test_a_thread_count_that_would_crash_is_reset_on_load(
    settings_path: Path, threads: int, caplog: pytest.LogCaptureFixture
) -> None:
    # A negative count segfaults llama.cpp: the window would crash on every start.
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(json.dumps({"threads": threads, "seed": 7}), encoding="utf-8")
    store = SettingsStore(settings_path)
    s = store.load()
    assert s == Settings(seed=7)  # the rest of the file is kept
    assert s.validate() == []
    s.target_options()  # the engine's options build (RuntimeOptions would refuse)
    [error] = store.load_errors
    assert error == (
        f"Threads must be 0 (automatic) or a whole number from 1 to 512, not {threads} "
        "in settings.json; using the default (0)."
    )
    assert error in caplog.text and "WARNING" in caplog.text
    assert settings_path.exists()  # a readable file is not moved aside


@pytest.mark.parametrize("threads", [-1, 513])
def test_runtime_options_refuse_a_bad_thread_count(threads: int) -> None:
    with pytest.raises(ValueError, match=f"thread count must be 0 .*, not {threads}"):
        RuntimeOptions(n_threads=threads)
    assert RuntimeOptions(n_threads=512).n_threads == 512


def test_default_path_follows_gambit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path))
    store = SettingsStore()
    assert store.path == tmp_path / "config" / "settings.json"
    store.save(Settings(seed=5))
    assert SettingsStore().load().seed == 5
