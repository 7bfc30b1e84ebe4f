"""``gambit-cli generate --json-schema FILE`` and ``--json``: the shape of the
reply, as the local server's ``response_format`` gives it (constrained
decoding, ``gambit.engine.text.grammar``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gambit.engine.text.grammar import ANY_OBJECT, GrammarError, json_schema_grammar


def add_shape_args(parser: argparse.ArgumentParser) -> None:
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--json-schema",
        type=Path,
        metavar="FILE",
        help="the reply is JSON that the JSON schema in FILE allows (constrained decoding)",
    )
    shape.add_argument("--json", action="store_true", help="the reply is a JSON object")


def reply_grammar(args: argparse.Namespace) -> str | None:
    """The grammar --json-schema or --json asks for (a GrammarError names what
    is wrong with the schema, before any model loads)."""
    if args.json:
        return json_schema_grammar(ANY_OBJECT)
    if args.json_schema is None:
        return None
    try:
        text = args.json_schema.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GrammarError(f"cannot read {args.json_schema}: {exc}") from None
    return json_schema_grammar(text)
