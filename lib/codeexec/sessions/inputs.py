"""A run's inputs: the client's file refs as the port's `Input`s, and what the reply says
of the ones that could not be placed.

An input lives in SOME session (whichever spelling of it the client sent: the API reads
both). The backend finds it by verifying the ref's name against its id
(`ids.paths_for`), opens each origin session once, and copies from it where the bytes are.
An input that cannot be placed is named in the reply, never silently skipped: a missing CSV
must not look like an empty one.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import ids, notes
from ..errors import BadRequest
from ..sandbox.port import Input, Placed
from . import placement
from .commands import InputRef


def of(refs: Sequence[InputRef]) -> tuple[Input, ...]:
    return tuple(Input(ref.id, ref.name, ref.session_id) for ref in chosen(refs))


def chosen(refs: Sequence[InputRef]) -> list[InputRef]:
    """The refs a run places. Of several that go to one path (a conversation that
    uploaded `data.csv` twice, from a client that does not rename them apart) one file
    can hold only one, and which one is said (`missing`): the one already in the session
    the run lands in when it names none (its first own file's), so that no other's bytes
    are copied over that upload, else the last one sent."""
    home = next(placement.own_sessions(refs), None)
    kept: dict[tuple[str, ...], InputRef] = {}
    for ref in refs:
        where = _lands_at(ref)
        if where not in kept or kept[where].session_id != home:
            kept[where] = ref
    return [ref for ref in refs if kept[_lands_at(ref)] is ref]


def _lands_at(ref: InputRef) -> tuple[str, ...]:
    """Where a ref goes, as far as its name says; a ref without a usable name goes where
    it is in its own session, which only the backend knows, so it is kept apart."""
    try:
        return ("name", ids.upload_path(ref.name)) if ref.name else ("ref", ref.id, ref.session_id or "")
    except BadRequest:
        return ("ref", ref.id, ref.session_id or "", ref.name or "")


def missing(refs: Sequence[InputRef], placed: Sequence[Placed]) -> list[str]:
    """The notes on inputs the run did not get, and on several sent for one path, capped
    so a reply stays small. `refs` as sent; `placed` one for each of the chosen ones."""
    kept = chosen(refs)
    said = [
        notes.not_copied(name, where.refused) if where.refused else notes.not_available(name)
        for ref, where in zip(kept, placed, strict=True)
        if where.path is None and (name := ref.name or ref.id)
    ]
    for ref in kept:
        others = {(r.id, r.session_id) for r in refs if r is not ref and _lands_at(r) == _lands_at(ref)}
        if others - {(ref.id, ref.session_id)} and ref.name:
            said.append(notes.same_name(ref.name, len(others) + 1, ref.id, ref.session_id))
    return notes.capped(said)
