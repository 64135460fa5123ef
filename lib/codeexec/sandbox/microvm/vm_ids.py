"""Session ids from MicroVM ids and back, with no table.

A session id on the wire is 21 characters of `[A-Za-z0-9_-]` on every backend (LibreChat
checks that pattern). A MicroVM id of 1 to 20 characters of `[A-Za-z0-9-]` becomes its
session id padded with `_`, which such an id never holds; one of exactly 21 characters
that does not end in `_` is its own session id. Any other id cannot be mapped: the backend
refuses the VM (and ends it) rather than hand out an id LibreChat would reject.
"""

from __future__ import annotations

import re

from ... import ids

_SHORT = re.compile(r"[A-Za-z0-9-]{1,20}")
_PAD = "_"


class Unmappable(ValueError):
    """A MicroVM id that no 21-character session id stands for."""


def session_of(vm_id: str) -> str:
    if _SHORT.fullmatch(vm_id):
        return vm_id.ljust(21, _PAD)
    if ids.is_session_id(vm_id) and not vm_id.endswith(_PAD):
        return vm_id
    raise Unmappable(f"the MicroVM id {vm_id!r} cannot be a 21-character session id")


def vm_of(session_id: str) -> str:
    if not ids.is_session_id(session_id):
        raise Unmappable("not a session id")
    vm_id = session_id.rstrip(_PAD)
    if not vm_id or (vm_id != session_id and not _SHORT.fullmatch(vm_id)):
        raise Unmappable("no MicroVM id maps to this session id")
    return vm_id
