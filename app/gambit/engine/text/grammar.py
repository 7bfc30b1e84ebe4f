"""Constrained decoding: the reply follows a grammar (a JSON schema, any JSON).

Where the grammar leaves one way on (``{"name": "`` before a value), those
tokens are a free draft (``GrammarState.forced``): the decoder proposes them
as point masses and the target verifies them in one batch instead of one
pass each (SGLang's jump-forward, guidance's fast-forward, made exact by
verification).

The grammar is llguidance's (the library llama.cpp's optional structured
output backend and vLLM use): a JSON schema compiles to its grammar text
(``json_schema_grammar``), and a ``GrammarState`` per reply says, before each
token, which tokens may come next. The target's distribution is masked to
them before sampling (``gambit.engine.verification.sampling.process``), at
every position a round verifies, so speculation stays exact for the
constrained distribution: a drafted token outside the grammar has
probability 0 and is rejected, and what is sampled instead is inside it.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.llamacpp
import numpy as np

from gambit.engine.machine.runtime import ModelRuntime

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # (a TypedDict of its stubs)

# JSON laid out on one line, ", " and ": " between items: one way to write
# each value, so a schema's keys and punctuation are forced (drafted free)
# instead of left to whitespace the model might choose (a schema may ask for
# other layouts with its "x-guidance" options).
JSON_LAYOUT: JsonCompileOptions = {
    "whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
}  # fmt: skip
# The grammar of any JSON object (``response_format: {"type": "json_object"}``).
ANY_OBJECT: dict[str, Any] = {"type": "object"}


class GrammarError(ValueError):
    """A grammar (or schema) that cannot be used, and why."""


def json_schema_grammar(schema: dict[str, Any] | str) -> str:
    """The grammar of the JSON texts ``schema`` allows; GrammarError names
    what is wrong with a schema that cannot be compiled."""
    try:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        loop = _ref_loop(json.loads(text))
        if loop:
            raise GrammarError(f"$ref {loop} refers back to itself without any JSON between")
        grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_LAYOUT)
    except (ValueError, TypeError, RecursionError) as exc:
        raise GrammarError(str(exc)) from None
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem and not problem.startswith("WARNING"):
        raise GrammarError(problem)
    return grammar


def lark_grammar(text: str) -> str:
    """The grammar of a Lark text (llguidance's dialect); GrammarError says
    what is wrong with one that cannot be used."""
    try:
        grammar = llguidance.LLMatcher.grammar_from_lark(text)
    except (ValueError, TypeError) as exc:
        raise GrammarError(str(exc)) from None
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem and not problem.startswith("WARNING"):
        raise GrammarError(problem)
    return grammar


def _ref_loop(schema: object) -> str | None:
    """A local ``$ref`` that leads back to itself through references alone
    (``{"$ref": "#/$defs/a"}`` where a is ``{"$ref": "#/$defs/a"}``): such a
    schema describes no JSON at all. A recursive schema that nests (a tree's
    children) is fine: the JSON between is its progress."""
    if not isinstance(schema, dict):
        return None

    def target(ref: str) -> object:
        node: object = schema
        for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else []:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def refs(node: object) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return own + [r for v in node.values() for r in refs(v)]
        return [r for v in node for r in refs(v)] if isinstance(node, list) else []

    for start in refs(schema):
        seen, ref = set(), start
        while ref.startswith("#") and ref not in seen:
            seen.add(ref)
            node = target(ref)
            if not (
                isinstance(node, dict) and set(node) == {"$ref"} and isinstance(node["$ref"], str)
            ):
                break
            ref = node["$ref"]
        else:
            if ref in seen:
                return start
    return None


class GrammarVocabulary:
    """A target's tokens as llguidance reads them: built once per model (about
    a second for a 49k vocabulary), its end-of-generation tokens as the EOS
    the grammar allows once it is complete."""

    def __init__(self, rt: ModelRuntime) -> None:
        eog = [t for t in range(rt.n_vocab) if rt.is_eog(t)]
        self.n_vocab = rt.n_vocab
        with warnings.catch_warnings():
            # (llguidance reads token attributes through a llama.cpp call that
            # llama-cpp-python marks deprecated: its concern, not a user's)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(
                rt.vocab, eos_token=eog or None
            )

    def state(self, grammar: str) -> GrammarState:
        return GrammarState(llguidance.LLMatcher(self.tokenizer, grammar), self.n_vocab)


class GrammarState:
    """Where a reply stands in its grammar: the tokens allowed next, and the
    tokens it has taken (``advance``)."""

    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int) -> None:
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._check()

    def allowed(self) -> np.ndarray:
        """A bool per token of the vocabulary: may it come next."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: self._n_vocab].astype(bool)
        if len(mask) < self._n_vocab:  # (a vocabulary row past the tokenizer's)
            mask = np.concatenate([mask, np.zeros(self._n_vocab - len(mask), dtype=bool)])
        return mask

    def forced(self) -> tuple[int, ...]:
        """The tokens the grammar allows alone from here (a schema's keys and
        punctuation): a draft that costs nothing and is always accepted."""
        return tuple(self._matcher.compute_ff_tokens())

    def advance(self, token: int) -> None:
        """``token`` was committed (it was allowed: the mask said so)."""
        self._matcher.consume_token(token)
        self._check()

    @property
    def complete(self) -> bool:
        """Whether the text so far is a whole sentence of the grammar."""
        return bool(self._matcher.is_accepting())

    def _check(self) -> None:
        if self._matcher.is_error():
            raise GrammarError(self._matcher.get_error())
