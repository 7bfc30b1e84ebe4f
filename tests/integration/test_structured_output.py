"""Constrained decoding on real weights (engine.text.grammar): a reply that
follows a JSON schema validates against it; temperature 0 gives the same
tokens with speculation on and off (Q8_0's kernels are batch-invariant);
temperature 1 gives the target's constrained distribution exactly, with a
poor draft whose guesses often leave the grammar; the server takes
``response_format`` from OpenAI's client, and a schema it cannot follow is a
400 naming the field, after which it keeps serving."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from serving import MODEL, Served
from test_lossless import _goodness_of_fit, _prompt

from gambit.bench.structured import load_shaped_prompts
from gambit.cli.main import main
from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.combined import CombinedDrafter
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.grammar import GrammarVocabulary, json_schema_grammar, lark_grammar
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams, process
from gambit.errors import GambitError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "cities": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "cities"],
    "additionalProperties": False,
}
ASK = "Alice is 31; she has lived in Paris and in Lyon. Describe her as JSON."
GREEDY = SamplingParams(temperature=0.0, seed=0)


@pytest.mark.parametrize("drafter", ["grammar alone", "draft", "draft+lookup"])
def test_greedy_constrained_replies_are_identical_with_speculation_on_and_off(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime, drafter: str
) -> None:
    config = GenerationConfig(96, GREEDY, grammar=json_schema_grammar(PERSON))
    prompt = _prompt(rt_q8_0, ASK)
    plain_decoder = SpeculativeDecoder(rt_q8_0)
    plain_decoder.speculation_enabled = False  # (the grammar drafts too, when on)
    plain = [t for r in plain_decoder.generate(prompt, config) for t in r.tokens]
    model = DraftModelDrafter(rt_q4_1)
    chosen = {"grammar alone": None, "draft": model,
              "draft+lookup": CombinedDrafter(model, PromptLookupDrafter())}[drafter]  # fmt: skip
    policy = _Recording(4)
    rounds = list(SpeculativeDecoder(rt_q8_0, chosen, policy).generate(prompt, config))
    assert [t for r in rounds for t in r.tokens] == plain
    # The policy learns of a drafter's tokens alone: the forced ones are, to
    # it, part of the batch verified (as a catch-up is).
    for rnd, seen in zip(rounds, policy.seen, strict=True):
        assert seen.n_forced == 0 and seen.drafted_by != "grammar"
        assert seen.outcomes == rnd.outcomes[rnd.n_forced :]
        assert seen.n_catch_up + seen.n_drafted == rnd.n_catch_up + rnd.n_drafted
    forced = [r for r in rounds if r.n_forced]
    assert forced and all(r.n_accepted >= r.n_forced for r in forced)  # keys, punctuation
    if chosen is not None:
        assert sum(r.n_drafted - r.n_forced for r in rounds) > 0
        # after a forced stretch, the drafter went on in the same round
        assert any(r.n_drafted > r.n_forced > 0 and r.drafted_by != "grammar" for r in rounds)
    text = "".join(r.text for r in rounds)
    jsonschema.validate(json.loads(text), PERSON)  # the reply is what the schema allows


class _Recording(FixedGamma):
    """A fixed γ that keeps the rounds it was told of."""

    def __init__(self, gamma: int) -> None:
        super().__init__(gamma)
        self.seen: list[Round] = []

    def observe(self, rnd: Round) -> None:
        self.seen.append(rnd)


def _exact_pairs(
    target: ModelRuntime, vocabulary: GrammarVocabulary, grammar: str, head: list[int],
    sampling: SamplingParams,
) -> dict[tuple[int, int], float]:  # fmt: skip
    """The target's constrained distribution of the two tokens after ``head``
    (its prompt and any tokens the grammar forced)."""
    exact = {}
    state = vocabulary.state(grammar)
    for token in head[len(head) - len(FORCED_HEAD.get(grammar, ())) :]:
        state.advance(token)
    target.sync(head)
    p1 = process(target.logits(-1), sampling, (), state.allowed())
    for t1, pr1 in zip(p1.ids.tolist(), p1.probs.tolist(), strict=True):
        after = vocabulary.state(grammar)
        for token in (*FORCED_HEAD.get(grammar, ()), t1):
            after.advance(token)
        target.sync([*head, t1])
        p2 = process(target.logits(-1), sampling, (), after.allowed())
        for t2, pr2 in zip(p2.ids.tolist(), p2.probs.tolist(), strict=True):
            exact[(t1, t2)] = pr1 * pr2
    return exact


# Lowercase words only: the target's capitals, digits and punctuation are
# masked; a poor draft sampled hot guesses them often, and each is rejected.
WORDS = lark_grammar("start: /[a-z ]+/")
# " one two three" first, which the grammar forces (drafted free), then words.
ONE_THEN_WORDS = lark_grammar('start: " one two three" /[ ][a-z]+/')
FORCED_HEAD: dict[str, tuple[int, ...]] = {}


@pytest.mark.parametrize("grammar", ["words", "forced then words"])
def test_temperature_one_gives_the_constrained_distribution_exactly(
    rt_q8_0_first8: ModelRuntime, rt_q4_1_first4: ModelRuntime, grammar: str
) -> None:
    target = rt_q8_0_first8
    text = WORDS if grammar == "words" else ONE_THEN_WORDS
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = _prompt(target, "Say: one two one two one two one two")
    vocabulary = GrammarVocabulary(target)
    forced = vocabulary.state(text).forced()
    assert bool(forced) == (grammar != "words")
    FORCED_HEAD[text] = forced
    exact = _exact_pairs(target, vocabulary, text, [*prompt, *forced], sampling)
    poor = DraftModelDrafter(
        rt_q4_1_first4, sampling=SamplingParams(temperature=2.5, top_k=6, top_p=1.0, min_p=0.0)
    )
    poor.prepare(prompt)
    decoder = SpeculativeDecoder(target, poor, FixedGamma(3))
    samples, drafted, accepted, by_grammar, chained = [], 0, 0, 0, 0
    for seed in range(500):
        # (a token past the pair: a round after the forced one drafts for the pair's second)
        config = GenerationConfig(
            len(forced) + 3, SamplingParams(**{**sampling.__dict__, "seed": seed}), grammar=text
        )
        rounds = list(decoder.generate(prompt, config))
        tokens = [t for r in rounds for t in r.tokens]
        assert tuple(tokens[: len(forced)]) == forced
        # (a forced stretch and the poor draft after it share a round)
        drafted += sum(r.n_drafted - r.n_forced for r in rounds)
        accepted += sum(max(0, r.n_accepted - r.n_forced) for r in rounds)
        by_grammar += sum(min(r.n_forced, r.n_accepted) for r in rounds)
        chained += any(r.n_drafted > r.n_forced > 0 for r in rounds)
        samples.append((tokens[len(forced)], tokens[len(forced) + 1]))
    assert accepted < drafted  # the draft's guesses were rejected (the residual path)
    assert accepted > 0 or forced  # and, drafting from the prompt, landed too
    assert by_grammar == (500 * len(forced))  # the forced tokens: drafted, always accepted
    assert chained == (500 if forced else 0)  # the draft went on after them, in their round
    p_value = _goodness_of_fit(samples, exact)
    assert p_value > 1e-3, f"{grammar}: p = {p_value:.2e} over {len(samples)} samples"


def test_response_format_from_openai_s_client(served: Served) -> None:
    schema_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    with served.client() as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": ASK}], temperature=0,
            max_tokens=96, response_format=schema_format,  # type: ignore[arg-type]
        )  # fmt: skip
        content = reply.choices[0].message.content or ""
        jsonschema.validate(json.loads(content), PERSON)
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": ASK}], temperature=0,
                max_tokens=96, response_format={"type": "json_object"}, stream=True,
            )
        )  # fmt: skip
    assert isinstance(json.loads("".join(c.choices[0].delta.content or "" for c in chunks)), dict)
    status, metrics = served.raw("GET", "/metrics")  # the forced tokens, counted apart
    assert status == 200
    assert re.search(
        r'^gambit_draft_tokens_accepted_by_source_total\{source="grammar"\} [1-9]', metrics, re.M
    )


def test_a_schema_that_cannot_be_followed_is_a_400_naming_response_format(
    served: Served,
) -> None:
    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    many = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    for response_format in [
        {"type": "xml"},
        "json",
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"schema": "{not json"}},
        {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}},
        {"type": "json_schema", "json_schema": {"schema": loop}},
        {"type": "json_schema", "json_schema": {"schema": many}},
        {
            "type": "json_schema",
            "json_schema": {"schema": {"minimum": 5, "maximum": 1, "type": "integer"}},
        },
    ]:
        body = {"model": MODEL, "messages": [{"role": "user", "content": ASK}],
                "response_format": response_format}  # fmt: skip
        status, answer = served.raw("POST", "/v1/chat/completions", json.dumps(body))
        assert status == 400, (response_format, answer)
        assert answer["error"]["param"] == "response_format", answer
    with served.client() as client:  # ... and the server keeps serving
        again = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
    assert again.choices[0].message.content


def test_the_command_line_follows_a_schema_and_refuses_a_broken_one(
    smol_q8_0: Path, tmp_path: Path
) -> None:
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    base = [sys.executable, "-m", "gambit", "generate", "--target", str(smol_q8_0), "--temp",
            "0", "--threads", "2", "--ctx", "1024", "--max-tokens", "96"]  # fmt: skip
    done = subprocess.run([*base, "--json-schema", str(schema), ASK],
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    jsonschema.validate(json.loads(done.stdout), PERSON)
    schema.write_text('{"type": "nonsense"}')
    refused = subprocess.run([*base, "--json-schema", str(schema), ASK],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert refused.returncode == 2 and "the JSON schema cannot be used" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_structured_bench_compares_every_way_of_drafting_a_constrained_reply(
    q8_0_first8: Path, q4_1_first8: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bundled suite's first four: three extractions and a tool call.
    args = ["bench", "--structured", "--limit", "4", "--target", q8_0_first8, "--draft",
            q4_1_first8, "--max-tokens", "64", "--threads", "1", "--json"]  # fmt: skip
    assert main([str(a) for a in args]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["rows"]
    both = "grammar + draft model"
    assert list(rows) == ["free", "constrained", "grammar", "draft model alone", both]
    for name, row in rows.items():
        assert row["tokens_per_s"] > 0 and len(row["per_prompt"]) == 4
        assert row["invalid"] == 0  # every constrained reply parsed (or was cut)
        # the grammar drafted what it forced only where it was asked to
        assert (row["forced_share"] > 0) == (name in ("grammar", both)), name
    assert rows["constrained"]["over_constrained"] == 1.0
    assert report["mask_cost"] is not None and report["both_over_drafter_alone"] > 0


def test_a_bench_prompt_with_a_schema_the_grammar_refuses_is_named_by_its_line(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "shaped.jsonl"
    good = {"prompt": "a", "suite": "s", "schema": PERSON}
    bad = {"prompt": "b", "schema": {"type": "object", "properties": {"a": {"$ref": "#/x"}}}}
    suite.write_text(f"{json.dumps(good)}\n\n{json.dumps(bad)}\n")
    with pytest.raises(GambitError, match=r"shaped\.jsonl:3: .*schema"):
        load_shaped_prompts(suite)
    assert [p.suite for p in load_shaped_prompts(_first_line(suite, tmp_path))] == ["s"]


def _first_line(path: Path, folder: Path) -> Path:
    first = folder / "first.jsonl"
    first.write_text(path.read_text().splitlines()[0] + "\n")
    return first
