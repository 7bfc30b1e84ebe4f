"""/v1/completions on the real engine, driven with OpenAI's own client: a raw
completion, whole and streamed, as the command line writes it; the middle
between a prefix and a suffix, laid out with the FIM tokens a model declares
(a copy of SmolLM2 whose metadata declares three of its tokens as FIM
tokens: neither model here has them); and a 400 naming the field for what
the server cannot do, after which it keeps serving."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import openai
import pytest
from serving import MODEL, OPTIONS, Served, generate_cli

from gambit.engine.machine.fim import FimTokens, fim_tokens
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.completion import completion_tokens
from gambit.storage.paths import cache_dir
from gguf_fixtures import copy_gguf, reader_of

TEXT = "The three primary colours are"
# <issue_start>, <issue_comment>, <issue_closed> in SmolLM2's vocabulary
DECLARED = FimTokens(prefix=8, suffix=9, middle=10)
PREFIX = "def add(a, b):\n    return"
SUFFIX = "\n\n\nprint(add(1, 2))\n"


def _engine(target: Path) -> Engine:
    return Engine(EngineConfig(target=target, target_options=OPTIONS, kernel_cache=cache_dir()))


@pytest.fixture(scope="module")
def fim_model(q8_0_first8: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    keys = gguf.Keys.Tokenizer
    return copy_gguf(
        reader_of(q8_0_first8),
        tmp_path_factory.mktemp("fim") / "SmolLM2-fim.Q8_0.gguf",
        add_u32={keys.FIM_PRE_ID: DECLARED.prefix, keys.FIM_SUF_ID: DECLARED.suffix,
                 keys.FIM_MID_ID: DECLARED.middle},
    )  # fmt: skip


def test_a_raw_completion_whole_and_streamed_as_the_cli_writes_it(
    served: Served, smol_q8_0: Path, smol_q4_1: Path
) -> None:
    with served.client() as client:
        _completes_as_the_cli(client, smol_q8_0, smol_q4_1)


def _completes_as_the_cli(client: openai.OpenAI, smol_q8_0: Path, smol_q4_1: Path) -> None:
    whole = client.completions.create(model=MODEL, prompt=TEXT, max_tokens=24, temperature=0)
    text = whole.choices[0].text
    assert text and text == generate_cli(smol_q8_0, smol_q4_1, 24, TEXT, raw=True)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 24
    assert (whole.model_extra or {})["gambit"]["drafted_tokens"] > 0  # speculation ran

    chunks = list(
        client.completions.create(
            model=MODEL, prompt=[TEXT], max_tokens=24, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "length"
    echoed = client.completions.create(
        model=MODEL, prompt=TEXT, max_tokens=24, temperature=0, echo=True
    )
    assert echoed.choices[0].text == TEXT + text


def test_what_the_server_cannot_do_is_a_400_naming_the_field(served: Served) -> None:
    with served.client() as client, pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=8)
    assert refused.value.param == "suffix" and "fill-in-the-middle" in refused.value.message
    for body, field in [
        ({}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": TEXT, "suffix": 5}, "suffix"),
        ({"prompt": TEXT, "n": 2}, "n"),
        ({"prompt": TEXT, "logprobs": 1}, "logprobs"),
        ({"prompt": TEXT, "echo": "yes"}, "echo"),
        ({"prompt": TEXT, "max_tokens": 0}, "max_tokens"),
    ]:
        status, answer = served.raw("POST", "/v1/completions", json.dumps({"model": MODEL, **body}))
        assert status == 400 and answer["error"]["param"] == field, (body, answer)
    # ... and the server keeps serving.
    with served.client() as client:
        again = client.completions.create(model=MODEL, prompt=TEXT, max_tokens=4, temperature=0)
    assert again.choices[0].text


def test_the_middle_is_filled_with_the_fim_tokens_the_model_declares(fim_model: Path) -> None:
    engine = _engine(fim_model)
    try:
        target = engine.target
        assert fim_tokens(target) == DECLARED
        expected = [
            *([target.bos_token] if target.add_bos else []),
            DECLARED.prefix, *target.tokenize(PREFIX, add_special=False, parse_special=False),
            DECLARED.suffix, *target.tokenize(SUFFIX, add_special=False, parse_special=False),
            DECLARED.middle,
        ]  # fmt: skip
        assert completion_tokens(target, PREFIX, SUFFIX, 16) == expected
        s = Served(engine)
        try:
            with s.client() as client:
                model = client.models.list().data[0].id
                filled = client.completions.create(
                    model=model, prompt=PREFIX, suffix=SUFFIX, max_tokens=8, temperature=0
                )
            assert filled.usage is not None and filled.usage.prompt_tokens == len(expected)
            assert filled.choices[0].finish_reason in ("stop", "length")
        finally:
            s.close()
    finally:
        engine.close()
