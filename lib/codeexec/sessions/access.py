"""Who may address a session, as the port's `Access` data: the caller's owner tag, the
intent, and whether the caller is the organization's own server.

The rule itself is `Access.admits` in the port, the one function both sides of a remote
backend evaluate. What is decided here is who the caller is: a session belongs to an
organization and one user of it, and `Caller.user` is None for one caller only, a key
holder that names no user (LibreChat's own server fetching a download for one of its
users), which may read and change every session of its organization but lands a run only
in one of its own.
"""

from __future__ import annotations

from .. import ids
from ..auth import Caller
from ..sandbox.port import Access, Intent


def access(caller: Caller, intent: Intent) -> Access:
    return Access(caller.owner.tag(), intent, server=caller.user is None)


def reading(caller: Caller) -> Access:
    return access(caller, Intent.READ)


def changing(caller: Caller) -> Access:
    return access(caller, Intent.CHANGE)


def landing(caller: Caller) -> Access:
    return access(caller, Intent.LAND)


def run_key(caller: Caller, request_id: str) -> str:
    """The handle a client's request id gives its run: bound to the caller, so a cancel
    can reach no one else's."""
    owner = caller.owner.tag()
    return ids.run_key(owner.org, owner.user, request_id)
