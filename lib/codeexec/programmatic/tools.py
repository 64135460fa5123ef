"""The client's tools as a program calls them: Python or bash identifiers, named as the
reference server names them, with their parameters in the order positional arguments take."""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest

_BASH_WORDS = (
    "if then else elif fi case esac for select while until do done in function time coproc alias bg bind break "
    "builtin caller cd command compgen complete continue declare dirs disown echo enable eval exec exit export "
    "false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read readarray "
    "readonly return set shift shopt source suspend test times trap true type typeset ulimit umask unalias unset "
    "wait"
)
_BASH_RESERVED = frozenset(_BASH_WORDS.split())  # bash's own words and builtins: a tool may not hide one


@dataclass(frozen=True)
class Tool:
    name: str  # the client's, as it asks for it back
    ident: str  # what the program calls it
    params: tuple[str, ...]  # the order positional arguments take (required ones first)


def tools_from(definitions: Sequence[dict[str, Any]], lang: str) -> list[Tool]:
    """The client's tool definitions ({name, parameters: JSON schema, ...}) as the program
    will call them."""
    tools = []
    for definition in definitions:
        name = str(definition.get("name") or "")
        schema = definition.get("parameters") or {}
        properties = list((schema.get("properties") or {}).keys())
        required = [p for p in properties if p in (schema.get("required") or [])]
        params = (*required, *(p for p in properties if p not in required))
        tools.append(Tool(name, _ident(name, lang), params))
    idents = [t.ident for t in tools]
    if len(set(idents)) < len(idents) or not all(idents):
        raise BadRequest("two tools have the same name once made identifiers, or a tool has none")
    return tools


def _ident(name: str, lang: str) -> str:
    ident = re.sub(r"[-\s.]" if lang == "bash" else r"[-\s]", "_", name)
    ident = re.sub(r"[^A-Za-z0-9_]", "", ident)
    if ident[:1].isdigit():
        ident = f"_{ident}"
    if lang == "bash":
        reserved = ident in _BASH_RESERVED or ident.lower().startswith("_ptc_")
    else:
        reserved = keyword.iskeyword(ident)
    return f"{ident}_tool" if reserved else ident
