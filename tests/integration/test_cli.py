"""``gambit-cli`` end to end, as a user runs it: a subprocess on real models."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gambit.cli.main import main
from gambit.storage.paths import cache_dir

# One thread: the machine's two cores are shared with other jobs, and llama.cpp's
# spinning thread pool slows down a hundredfold when its threads get preempted.
FAST = ["--threads", "1", "--ctx", "512"]
METRIC_KEYS = {
    "tokens_per_s",
    "speedup",
    "acceptance_rate",
    "mean_accepted",
    "p50_ms",
    "p99_ms",
    "ttft_ms",
    "overhead_share",
}


def gambit(*args: str | Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}  # GAMBIT_TEST_MODELS passes through
    return subprocess.run(
        [sys.executable, "-m", "gambit", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def _stats_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if "tok/s" in line]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --------------------------------------------------------------------------- generate


@pytest.fixture(scope="module")
def greedy_runs(
    tmp_path_factory: pytest.TempPathFactory, smol_q4_1: Path, smol_q8_0: Path
) -> dict[str, subprocess.CompletedProcess[str]]:
    home = tmp_path_factory.mktemp("gambit-home")
    common = [*FAST, "--temp", "0", "--max-tokens", "12", "Say hello"]
    variants: dict[str, list[str | Path]] = {
        "q4_1": ["--target", smol_q4_1],
        "q8_0": ["--target", smol_q8_0],
        # fixed γ, so that speculation runs on every round of a reply this short
        "q8_0 lookup": ["--target", smol_q8_0, "--lookup", "--policy", "fixed"],
        "q8_0 draft": ["--target", smol_q8_0, "--draft", smol_q4_1, "--policy", "fixed"],
    }
    return {name: gambit("generate", *args, *common, home=home) for name, args in variants.items()}


def test_generate_plain(greedy_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    for name in ("q4_1", "q8_0"):
        proc = greedy_runs[name]
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip(), name
        line = _stats_line(proc)
        assert "[target only]" in line
        assert "12 tokens" in line
        assert "stop: max tokens" in line
        assert "accepted" not in line


def test_generate_lookup(greedy_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = greedy_runs["q8_0 lookup"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    line = _stats_line(proc)
    assert "[prompt lookup]" in line
    assert re.search(r"accepted \d+/\d+", line), line


def test_generate_draft(greedy_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = greedy_runs["q8_0 draft"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    line = _stats_line(proc)
    assert "[draft model]" in line
    accepted = re.search(r"accepted (\d+)/(\d+)", line)
    assert accepted, line
    assert 0 <= int(accepted[1]) <= int(accepted[2]) and int(accepted[2]) > 0  # it drafted


def test_generate_with_draft_model_and_lookup_says_what_each_supplied(
    tmp_path: Path, smol_q8_0: Path, smol_q4_1: Path
) -> None:
    text = "Repeat this list exactly, one item per line: apple, pear, plum, cherry, apple, pear."
    args = ["--target", smol_q8_0, *FAST, "--temp", "0", "--max-tokens", "64", text]
    # fixed γ: lookup after a long match, the draft model elsewhere (the drafter's preference)
    both = gambit(
        "generate", *args, "--draft", smol_q4_1, "--lookup", "--policy", "fixed", home=tmp_path
    )
    assert both.returncode == 0, both.stderr
    line = _stats_line(both)
    assert "[draft model + lookup]" in line
    # accepted 30/41 (73%): 20 lookup, 10 draft — each source named with its count
    found = re.search(r"accepted (\d+)/\d+ \(\d+%\): (\d+) (\w+), (\d+) (\w+)", line)
    assert found, line
    assert {found[3], found[5]} == {"lookup", "draft"}
    assert int(found[2]) + int(found[4]) == int(found[1])
    plain = gambit("generate", *args, home=tmp_path)
    assert both.stdout == plain.stdout  # greedy: speculation changes nothing


def test_drafter_flags_that_do_not_combine_are_refused(tmp_path: Path, smol_q8_0: Path) -> None:
    proc = gambit(
        "generate", "--target", smol_q8_0, "--layer-skip", "--lookup", "Hi", home=tmp_path
    )
    assert proc.returncode == 2
    assert "--lookup and --layer-skip cannot be used together" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_generate_greedy_output_is_the_same_with_or_without_speculation(
    greedy_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    # Q8_0's CPU kernels give the same logits for a small batch as for single
    # tokens, so greedy speculation must reproduce plain decoding exactly.
    plain = greedy_runs["q8_0"].stdout
    assert plain.strip()
    assert greedy_runs["q8_0 lookup"].stdout == plain
    assert greedy_runs["q8_0 draft"].stdout == plain


def test_generate_missing_model(tmp_path: Path) -> None:
    proc = gambit("generate", "--target", "/nonexistent.gguf", "Say hello", home=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gambit-cli: error:"), proc.stderr
    assert "not found" in proc.stderr and "/nonexistent.gguf" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("prompt", ["", "  \n\t"])
def test_an_empty_chat_prompt_is_refused_before_anything_loads(tmp_path: Path, prompt: str) -> None:
    """As the window refuses an empty message (issue 35: 512 tokens of rambling)."""
    proc = gambit("generate", "--target", tmp_path / "never-opened.gguf", prompt, home=tmp_path)
    assert proc.returncode == 2
    assert "gambit-cli generate: error: the prompt is empty" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_raw_completes_from_nothing(tmp_path: Path, q8_0_first8: Path) -> None:
    """--raw "" stays allowed: a base model may continue from nothing (its
    begin-of-text token)."""
    proc = gambit(
        "generate", "--target", q8_0_first8, *FAST, "--temp", "0", "--max-tokens", "4",
        "--raw", "", home=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "4 tokens" in _stats_line(proc)


def test_the_help_says_where_the_self_test_is_and_it_answers(tmp_path: Path) -> None:
    """The README's self-test is listed by gambit-cli --help, and gambit-cli runs it."""
    listed = gambit("--help", home=tmp_path)
    assert listed.returncode == 0 and "gambit-cli --self-test" in listed.stdout
    options = gambit("--self-test", "--help", home=tmp_path)
    assert options.returncode == 0, options.stderr
    assert "usage: gambit --self-test" in options.stdout


THREADS = "argument --threads: must be 0 (automatic) or a whole number from 1 to 512, not {}"
MAX_TOKENS = "argument --max-tokens: must be between 1 and 32768, not {}"


# The flags that Settings declares (gambit.cli.setting_flags): the window's rule,
# under the window's name, before anything loads.
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threads", "-1"], THREADS.format(-1)),  # segfaulted inside llama.cpp
        (["--threads", "100000"], THREADS.format(100000)),
        (["--threads", "two"], "argument --threads: must be a whole number, not 'two'"),
        (["--max-tokens", "0"], MAX_TOKENS.format(0)),  # generated nothing, silently
        (["--max-tokens", "-5"], MAX_TOKENS.format(-5)),
        (["--temp", "-1"], "argument --temp: must be 0 or more, not -1"),
        (["--temp", "nan"], "argument --temp: must be a finite number"),
        (["--top-p", "0"], "argument --top-p: must be more than 0 and at most 1, not 0"),
        (["--ctx", "100"], "argument --ctx: must be between 256 and 131072 tokens"),
        (["--gamma", "0"], "argument --gamma: must be 1 or more, not 0"),
    ],
)
@pytest.mark.parametrize("command", ["generate", "bench"])
def test_bad_counts_are_refused_with_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    args: list[str],
    message: str,
) -> None:
    # gambit-cli's own main (what ``python -m gambit`` runs), in this process:
    # the arguments are refused before anything is read or loaded.
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path))
    extra = ["Say hello"] if command == "generate" else ["--prompts", str(tmp_path / "p.jsonl")]
    with pytest.raises(SystemExit) as exited:
        main([command, "--target", str(tmp_path / "never-opened.gguf"), *args, *extra])
    out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert f"gambit-cli {command}: error: {message}" in err
    assert out == ""


def test_a_bad_count_exits_2_from_the_command_line(tmp_path: Path) -> None:
    proc = gambit("generate", "--target", tmp_path / "never-opened.gguf", "--threads", "-1",
                  "Say hello", home=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert f"gambit-cli generate: error: {THREADS.format(-1)}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------------------ bench


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    lines = [
        {"prompt": "Say hello", "suite": "a"},
        {"prompt": "Count from one to five.", "suite": "b"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _bench(
    home: Path, target: Path, draft: Path, prompts: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return gambit(
        "bench",
        "--target",
        target,
        "--draft",
        draft,
        *FAST,
        # one speculative mode (this build compares policies: adaptive, fixed, off)
        "--policy",
        "fixed",
        "--prompts",
        prompts,
        "--max-tokens",
        "16",
        *extra,
        home=home,
    )


def test_bench_json(tmp_path: Path, smol_q8_0: Path, smol_q4_1: Path, prompts_file: Path) -> None:
    proc = _bench(tmp_path, smol_q8_0, smol_q4_1, prompts_file, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["drafter"] == "draft"
    assert report["drafter_name"] == "draft model"
    assert report["temperature"] == 0.0
    suites = report["suites"]
    assert set(suites) == {"a", "b", "ALL"}
    for suite, by_mode in suites.items():
        assert list(by_mode) == ["target-only", "fixed"], suite
        for mode, figures in by_mode.items():
            assert set(figures) >= METRIC_KEYS, (suite, mode)
            assert figures["tokens_per_s"] > 0
            assert 0.0 <= figures["acceptance_rate"] <= 1.0
            assert 0.0 <= figures["overhead_share"] <= 1.0
            assert figures["p50_ms"] <= figures["p99_ms"]
        assert by_mode["target-only"]["speedup"] == 1.0
        assert by_mode["target-only"]["acceptance_rate"] == 0.0
        assert by_mode["fixed"]["speedup"] > 0
    assert suites["ALL"]["fixed"]["tokens"] == (
        suites["a"]["fixed"]["tokens"] + suites["b"]["fixed"]["tokens"]
    )
    assert report["identical_outputs"] == "2/2"
    assert report["placement"] is None  # the target ran here
    curve = report["cost_curve"]  # the calibration: t(1), and t(k)/t(1) for the k measured
    assert curve["t1_ms"] > 0 and curve["ratio"]["1"] == 1.0 and len(curve["ratio"]) > 1
    assert suites["a"]["target-only"]["mean_gamma"] == 0.0
    assert 0 < suites["a"]["fixed"]["mean_gamma"] <= report["gamma"]


def test_bench_table(tmp_path: Path, smol_q8_0: Path, smol_q4_1: Path, prompts_file: Path) -> None:
    proc = _bench(tmp_path, smol_q8_0, smol_q4_1, prompts_file)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("suite"))
    assert "speedup" in header and "tok/s" in header
    rows = [line.split() for line in lines if line.split()[:1] in (["a"], ["b"], ["ALL"])]
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        (s, m) for s in ("a", "b", "ALL") for m in ("target-only", "fixed")
    )
    assert "identical with and without speculation: 2/2" in proc.stdout
    # progress goes to stderr, one line per run
    assert len([line for line in proc.stderr.splitlines() if "tok/s" in line]) == 4


def test_bench_bad_prompts_file(tmp_path: Path, smol_q8_0: Path) -> None:
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "Say hello", "suite": "a"}\nthis is not JSON\n', encoding="utf-8")
    proc = gambit("bench", "--target", smol_q8_0, *FAST, "--prompts", bad, home=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gambit-cli: error:"), proc.stderr
    assert f"{bad}:2:" in proc.stderr  # names the file and the line
    assert "JSON" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bench_without_a_drafter_says_so_and_one_suite_has_no_all_row(
    tmp_path: Path, smol_q8_0: Path
) -> None:
    one_suite = tmp_path / "one.jsonl"
    one_suite.write_text(json.dumps({"prompt": "Say hello", "suite": "chat"}) + "\n")
    proc = gambit(
        "bench", "--target", smol_q8_0, *FAST, "--prompts", one_suite, "--max-tokens", "8",
        "--json", home=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "plain decoding (target only)" in proc.stderr  # no drafter: it says what it runs
    report = json.loads(proc.stdout)  # stdout is the report alone
    assert set(report["suites"]) == {"chat"}  # no ALL repeating the one suite
    assert list(report["suites"]["chat"]) == ["target-only"]
    # --json still shows its progress, on stderr
    assert len([line for line in proc.stderr.splitlines() if "tok/s" in line]) == 1


def test_models_inspect_default(tmp_path: Path, smol_q4_1: Path) -> None:
    from gambit.models.default_model import DEFAULT_MODEL_FILE

    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    try:
        os.link(smol_q4_1, models / DEFAULT_MODEL_FILE)
    except OSError:
        import shutil

        shutil.copyfile(smol_q4_1, models / DEFAULT_MODEL_FILE)
    proc = gambit("models", "inspect", "default", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert Path(info["path"]) == models / DEFAULT_MODEL_FILE


def two_short_prompts(tmp_path: Path) -> Path:
    """A chat and a code prompt, short: the bench's work, not prompt reading, is under test."""
    prompts = tmp_path / "prompts.jsonl"
    lines = [
        {"prompt": "Name three colours.", "suite": "chat"},
        {"prompt": "Write a Python function that adds two numbers.", "suite": "code"},
    ]
    prompts.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return prompts


def test_bench_regimes(tmp_path: Path, q4_1_first8: Path) -> None:
    """The regime bench on a cost-scaled target (Q8_0 with twice its blocks,
    the added ones with zero outputs; from the short Q4_1 of conftest, SmolLM2's
    first 8 blocks, so 16 blocks): derived into the bench's cache, run with
    fixed γ up to 16 and trees, and reported with the bound, TTFT and the gaps
    between tokens as they arrive and as the paced chat view shows them."""
    out = tmp_path / "out"
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path / "home")}
    prompts = two_short_prompts(tmp_path)
    args = ["bench", "--regimes", "--target", q4_1_first8, "--targets", "Q8_0x2",
            "--drafters", "draft", "--prompts", prompts, "--per-suite", "1", "--max-tokens", "10",
            "--threads", "2", "--out", out, "--json"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "gambit", *map(str, args)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [(p["target"], p["drafter"]) for p in report["pairs"]] == [("Q8_0x2", "draft")]
    # Derived into the bench's cache folder, never into a model library (named
    # after the source less its last part: SmolLM2-135M-Instruct.Q4_1.Q8_0x2.gguf).
    derived = f"{q4_1_first8.stem.rsplit('.', 1)[0]}.Q8_0x2.gguf"
    assert (cache_dir() / "regimes" / derived).is_file()
    for pair in report["pairs"]:
        assert pair["scaled"] and pair["label"] == "Q8_0 ×2 (cost-scaled)"
        assert pair["regime"] in ("compute-bound", "bandwidth-bound")
        assert set(pair["suites"]) == {"ALL", "chat", "code"}
        cell = pair["suites"]["ALL"]
        chains = {f"fixed={g}" for g in (1, 2, 4, 8, 12, 16)}
        assert set(cell["modes"]) == {"target-only", "adaptive", *chains, "fixed=6+2", "fixed=12+4"}
        assert cell["bound"] >= 1.0 and cell["bound_gamma_max"] == 16
        assert cell["divergence"].endswith("/18")  # 9 speculative modes x 2 prompts
        assert cell["modes"]["fixed=16"]["tokens"] > 0
        assert cell["ttft_ratio"] > 0
        assert cell["modes"]["adaptive"]["p99_shown_ms"] >= 0
        # adaptive against the best fixed, prompt by prompt (2 prompts: an interval
        # around the ratio) and against the best chosen on the other prompt
        low, high = cell["adaptive_vs_best_fixed_interval"]
        assert 0 < low <= high
        low, high = cell["adaptive_speedup_interval"]  # against target-only
        assert 0 < low <= high
        assert cell["adaptive_vs_held_out_fixed"] > 0
        # and after the first token, where a draft model's reading of the prompt counts
        assert cell["adaptive_vs_best_fixed_after_first_token"] > 0
        assert cell["adaptive_after_first_token"] > 0
        assert cell["after_first_token_best_fixed"] in cell["modes"]
        assert all(row["after_first_token"]["speedup"] > 0 for row in cell["per_prompt"])
        # Round efficiency against parts timed at the replies' own context.
        at_context = cell["costs_at_context"]
        assert at_context["t1_ms"] > 0 and set(at_context["t_ratio"]) == {"2", "3", "5", "9"}
        assert at_context["draft_ratio"] > 0
        for gamma, ms in cell["round_ms"].items():
            assert ms["round"] > 0 and ms["parts"] > 0
            assert cell["round_efficiency"][gamma] == pytest.approx(ms["parts"] / ms["round"])
    draft_alpha = report["pairs"][0]["suites"]["ALL"]["alpha"]
    assert 0 < len(draft_alpha) <= 16 and all(0.0 <= a <= 1.0 for a in draft_alpha)
    assert (out / "regimes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "regimes.md").read_text(encoding="utf-8")
    assert "| Q8_0 ×2 (cost-scaled) (" in table and "adapt/held-out best" in table
    assert "[2/2]" in proc.stderr  # progress on stderr while it runs


def test_bench_regimes_samples_each_prompt_several_times_above_temperature_0(
    tmp_path: Path, q4_1_first8: Path
) -> None:
    """Above temperature 0 each mode samples its own reply, so --samples N runs
    every prompt N times in every mode, each from its own seed, and judges each
    prompt by its replies together; at temperature 0 it is refused, with a
    message, since every reply would be the same."""
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path / "home")}
    common = ["bench", "--regimes", "--target", q4_1_first8, "--targets", "Q8_0x2",
              "--drafters", "draft", "--prompts", two_short_prompts(tmp_path),
              "--per-suite", "1", "--max-tokens", "10", "--threads", "2", "--fixed", "4",
              "--samples", "2"]  # fmt: skip

    def bench(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gambit", *map(str, [*common, *extra])],
            capture_output=True, text=True, env=env, timeout=900, check=False,
        )  # fmt: skip

    proc = bench("--temp", "0.7", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["samples"] == 2 and report["temperature"] == 0.7
    cell = report["pairs"][0]["suites"]["ALL"]
    replies = {m: f["replies"] for m, f in cell["modes"].items()}
    assert {"target-only", "adaptive", "fixed=4"} <= set(replies)  # (and trees: scaled)
    assert set(replies.values()) == {4}  # 2 prompts × 2 samples in every mode
    assert [row["prompt"] for row in cell["per_prompt"]] == ["chat #1", "code #1"]
    assert cell["divergence"] is None  # (sampled replies: not compared with target-only)

    refused = bench()  # (the bench's default temperature: 0)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "--samples needs a temperature above 0" in refused.stderr


def test_bench_regimes_playback_records_once_and_plays_again_without_a_model(
    tmp_path: Path, q4_1_first8: Path
) -> None:
    """``--playback`` records each prompt's greedy reply with the draft's guesses
    along it and plays every policy on it at the measured costs; the recording
    it keeps plays to the same figures again, loading no model; a damaged one
    is refused with a message."""
    out = tmp_path / "out"
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path / "home")}
    prompts = two_short_prompts(tmp_path)
    args = ["bench", "--regimes", "--playback", "--target", q4_1_first8, "--targets", "Q8_0x2",
            "--drafters", "draft", "--prompts", prompts, "--per-suite", "1", "--max-tokens", "24",
            "--threads", "2", "--out", out, "--json"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "gambit", *map(str, args)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    [pair] = report["pairs"]
    assert (pair["target"], pair["drafter"]) == ("Q8_0x2", "draft")
    assert pair["prompts"] == ["chat #1", "code #1"]
    recorded = pair["recording"]["replies"]
    # The draft is the target's own network: it guesses most of the reply.
    assert all(len(r["runs"]) == len(r["confidence"]) > 1 for r in recorded)
    assert sum(r["runs"][0] for r in recorded) > 0
    for key in ("rate", "after_first"):
        suite = pair[key]["suite"]
        assert suite["target-only"] == pytest.approx(1.0)
        assert set(suite) == {"adaptive", "cold", "fixed=4", "fixed=8", "fixed=16", "target-only"}
        assert all(x > 0 for x in pair[key]["adaptive_vs_judge"])
        assert pair[key]["orders"]["sessions"] == 2 * 2  # (two orders of two prompts)
    saved = out / "playback.json"
    again = subprocess.run(
        [sys.executable, "-m", "gambit", "bench", "--playback-from", str(saved), "--json"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    [replayed] = json.loads(again.stdout)["pairs"]
    assert replayed["rate"] == pair["rate"] and replayed["after_first"] == pair["after_first"]
    text = subprocess.run(
        [sys.executable, "-m", "gambit", "bench", "--playback-from", str(saved),
         "--batch-scale", "1.6"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert "batches ×1.6, played on 2 recorded replies" in text.stdout
    damaged = tmp_path / "damaged.json"
    damaged.write_text(saved.read_text(encoding="utf-8")[:200], encoding="utf-8")
    bad = subprocess.run(
        [sys.executable, "-m", "gambit", "bench", "--playback-from", str(damaged)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "cannot play" in bad.stderr and "Traceback" not in bad.stderr


def test_bench_regimes_with_pairs_of_two_networks(
    tmp_path: Path, q4_1_first8: Path, gemma_q4_k_m: Path
) -> None:
    """Rows whose draft is another network: a model of another tokenizer
    drafting through text (Gemma for SmolLM2, raw completion), timed and
    played on its recorded reply, and a weaker draft of the same tokenizer
    (the draft without some of its blocks, written into the bench's cache)."""
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path / "home")}
    prompts = tmp_path / "raw.jsonl"
    prompts.write_text(
        json.dumps(
            {"prompt": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n", "suite": "code"}
        )
        + "\n",
        encoding="utf-8",
    )
    common = ["bench", "--regimes", "--target", q4_1_first8, "--targets", "Q8_0x2",
              "--drafters", "draft", "--prompts", prompts, "--max-tokens", "8", "--threads", "2",
              "--json"]  # fmt: skip
    runs = {
        "text": [*common, "--raw", "--draft", gemma_q4_k_m, "--fixed", "2", "--fresh"],
        "weaker": [*common, "--draft-without", "3", "--fixed", "none"],
        "played": [*common, "--raw", "--draft", gemma_q4_k_m, "--playback"],
    }
    reports = {}
    for name, args in runs.items():
        proc = subprocess.run(
            [sys.executable, "-m", "gambit", *map(str, args)],
            capture_output=True, text=True, env=env, timeout=900, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        reports[name] = json.loads(proc.stdout)
    (text,) = reports["text"]["pairs"]
    assert reports["text"]["raw"] is True
    assert (text["draft"], text["draft_how"]) == (gemma_q4_k_m.name, "through text")
    # Chains only (no trees through text), the fixed γ asked for.
    assert set(text["suites"]["ALL"]["modes"]) == {"target-only", "adaptive", "fixed=2"}
    assert text["suites"]["ALL"]["modes"]["fixed=2"]["drafted_tokens"] > 0
    # Prompt by prompt: adaptive (from nothing learned, --fresh) ÷ that prompt's best fixed γ.
    assert reports["text"]["fresh"] is True
    (row,) = text["suites"]["ALL"]["per_prompt"]
    assert (row["prompt"], row["best_fixed"]) == ("code #1", "fixed=2")
    assert text["suites"]["ALL"]["worst_prompt"] == row
    (weaker,) = reports["weaker"]["pairs"]
    derived = f"{q4_1_first8.stem}.without-3.gguf"
    assert (weaker["draft"], weaker["draft_how"]) == (derived, "tokens")
    assert (cache_dir() / "regimes" / derived).is_file()
    assert set(weaker["suites"]["ALL"]["modes"]) == {"target-only", "adaptive"}
    # Played through text: the chain the draft wrote from each position, recorded.
    (played,) = reports["played"]["pairs"]
    (reply,) = played["recording"]["replies"]
    assert len(reply["chains"]) == len(reply["runs"]) > 1 and reply["chains"][0] == []
    assert all(len(c) <= 16 for c in reply["chains"])
    assert all(r <= len(c) for r, c in zip(reply["runs"], reply["chains"], strict=True))
    assert played["rate"]["suite"]["target-only"] == pytest.approx(1.0)


def test_bench_regimes_compares_draft_and_lookup_with_the_draft_model_alone(
    tmp_path: Path, q4_1_first8: Path
) -> None:
    """The draft model with lookup runs a third mode on the same engine: the
    same adaptive policy with lookup's copies withheld, and the report says
    what lookup adds against it, prompt by prompt."""
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path / "home")}
    prompts = tmp_path / "raw.jsonl"
    verse = "one two three four five six seven eight nine ten\n"
    prompts.write_text(json.dumps({"prompt": verse * 3, "suite": "copy"}) + "\n", encoding="utf-8")
    # --cold: from nothing learned of the pair. The test cache (GAMBIT_CACHE)
    # keeps what earlier runs learned, and a memory that this short pair does
    # not pay left the model alone drafting nothing.
    args = ["bench", "--regimes", "--target", q4_1_first8, "--targets", "Q8_0x2", "--raw",
            "--drafters", "draft+lookup", "--prompts", prompts, "--max-tokens", "24",
            "--threads", "2", "--fixed", "none", "--cold", "--json"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "gambit", *map(str, args)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (pair,) = json.loads(proc.stdout)["pairs"]
    cell = pair["suites"]["ALL"]
    assert set(cell["modes"]) == {"target-only", "adaptive", "model alone"}
    alone = cell["modes"]["model alone"]
    assert alone["drafted_tokens"] > 0
    # (what each source supplied is listed only where more than one did)
    assert set(alone.get("accepted_by_drafter", {"draft model": 0})) == {"draft model"}
    assert cell["adaptive_vs_model_alone"] == pytest.approx(
        cell["modes"]["adaptive"]["speedup"] / alone["speedup"]
    )
    (row,) = cell["per_prompt"]
    assert row["vs_model_alone"] > 0
    # The ceiling on what copies could add to this reply was measured: copies
    # are one more choice, so with perfect foresight never a loss.
    assert row["lookup_ceiling"] >= 1.0
    assert cell["lookup_ceiling"] == pytest.approx(row["lookup_ceiling"])


def test_bench_reuse_measures_the_memory_of_earlier_chats(tmp_path: Path, smol_q4_1: Path) -> None:
    # A usual request, asked in an earlier chat and twice again: its earlier
    # replies are copied from the memory (filled with earlier turns only).
    haiku = "Write a haiku about autumn leaves."
    suite = tmp_path / "reuse.jsonl"
    lines = [{"earlier": [haiku], "prompt": haiku}, {"prompt": haiku}]
    suite.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    proc = gambit(
        "bench", "--reuse", "--lookup", "--target", smol_q4_1, *FAST, "--max-tokens", "32",
        "--prompts", suite, "--json", home=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["scenarios"] == 2
    assert report["diverged"] == []  # greedy, Q4_1: the same reply in every mode
    modes = report["modes"]
    assert list(modes) == ["target only", "lookup", "lookup + memory"]
    assert modes["target only"]["accepted"] == 0
    assert "earlier chats" not in modes["lookup"]["accepted_by_drafter"]
    assert modes["lookup + memory"]["accepted_by_drafter"]["earlier chats"] >= 16
    assert modes["lookup + memory"]["accepted"] > modes["lookup"]["accepted"]
    assert report["memory_tokens"] > 0 and 0 < report["memory_bytes"] < 2**20
    low, high = report["memory_over_lookup"][1:]
    assert 0 < low <= high


def test_bench_reuse_needs_lookup(tmp_path: Path, smol_q4_1: Path) -> None:
    proc = gambit("bench", "--reuse", "--target", smol_q4_1, *FAST, home=tmp_path)
    assert proc.returncode == 2
    assert "--reuse needs prompt lookup" in proc.stderr
    assert "Traceback" not in proc.stderr
