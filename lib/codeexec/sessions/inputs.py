"""A run's inputs: the client's file refs as the port's `Input`s, and what the reply says
of the ones that could not be placed.

An input lives in SOME session, named under either spelling (`session_id` or
`storage_session_id`). The backend finds it by verifying the ref's name against its id
(`ids.paths_for`), opens each origin session once, and copies from it where the bytes are.
An input that cannot be placed is named in the reply, never silently skipped: a missing CSV
must not look like an empty one.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import notes
from ..sandbox.port import Input, Placed
from ..wire import FileRef


def of(refs: Sequence[FileRef]) -> tuple[Input, ...]:
    return tuple(Input(ref.id, ref.name, ref.home_session) for ref in refs)


def missing(refs: Sequence[FileRef], placed: Sequence[Placed]) -> list[str]:
    """The notes on inputs the run did not get, capped so a reply stays small."""
    said = [
        notes.not_copied(name, where.refused) if where.refused else notes.not_available(name)
        for ref, where in zip(refs, placed, strict=True)
        if where.path is None and (name := ref.name or ref.id)
    ]
    return notes.capped(said)
