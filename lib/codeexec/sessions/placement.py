"""Where a run lands, as the port's `Placement`: the backend decides in the one request.

- The stateful profile: the session its hint names, one per organization, user and hint,
  its id derived from the three (no table; another user's same hint derives another).
- Otherwise the session the run asks for, else the ones its files live in (G1 LibreChat
  sends no top-level session_id), the first that is the caller's own and not shared.
  Refs to shared files (an agent's, a skill's) are never candidates.
- Otherwise a new session of the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

from .. import ids
from ..auth import Caller
from ..errors import ProfileMismatch
from ..sandbox.port import Placement
from .access import landing
from .commands import InputRef, Landing


def for_run(caller: Caller, asked: Landing, named_sessions: bool) -> Placement:
    if asked.stateful and not named_sessions:
        raise ProfileMismatch("this deployment's backend cannot keep a stateful workspace")
    if asked.hint and named_sessions:
        return Placement(landing(caller), named=_hinted(caller, asked.hint))
    return Placement(landing(caller), _candidates(asked))


def _hinted(caller: Caller, hint: str) -> str:
    owner = caller.owner.tag()
    return ids.derived_id("hint", owner.org, owner.user, hint)


def _candidates(asked: Landing) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c for c in (asked.session_id, *own_sessions(asked.inputs)) if c))


def own_sessions(refs: Iterable[InputRef]) -> Iterator[str]:
    """The sessions of a run's own files (not shared ones), where it may land."""
    return (ref.session_id for ref in refs if not ref.shared and ref.session_id)


def runtime_status(where: Placement, created: bool) -> Literal["new", "reused"] | None:
    """The stateful profile's word on its session: made for this call, or one it reused."""
    if where.named is None:
        return None
    return "new" if created else "reused"
