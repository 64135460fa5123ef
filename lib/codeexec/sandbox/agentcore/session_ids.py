"""AgentCore's session ids as the wire's 21-character ids, and back, without a table.

AgentCore names a session with a ULID: 26 characters of Crockford's base32 (0-9 and the
capitals but I, L, O and U) spelling a 128-bit number whose top 48 bits are a
millisecond timestamp. The wire takes 21 characters of `[A-Za-z0-9_-]`, which carry 126
bits. The top two bits of a ULID are the top two of its timestamp, and they stay zero
until the timestamp reaches 2**46 ms, in the year 4199: so every ULID AgentCore makes
until then, spelled canonically, fits in 21 base64url characters, and each of those 21
characters spells one such ULID. Anything else AgentCore might answer (another id
scheme, a ULID written in lower case, a timestamp past 4199) has no wire id: `to_wire`
says so with None, and the backend refuses that session rather than hand out an id it
could not take back.
"""

from __future__ import annotations

import base64

from ... import ids

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RFC4648 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_FROM_CROCKFORD = str.maketrans(_CROCKFORD, _RFC4648)
_TO_CROCKFORD = str.maketrans(_RFC4648, _CROCKFORD)
ULID_CHARS = 26
_WIRE_BITS = 126


def to_wire(session_id: str) -> str | None:
    """The 21-character wire id of an AgentCore session id, or None when it has none."""
    if len(session_id) != ULID_CHARS or not set(session_id) <= set(_CROCKFORD):
        return None
    # 26 base32 characters are 130 bits: six leading zeros make the 32 that b32decode takes.
    value = int.from_bytes(base64.b32decode(("000000" + session_id).translate(_FROM_CROCKFORD)))
    if value >> _WIRE_BITS:
        return None  # a number past 126 bits: not a ULID of before 4199
    # 126 bits shifted to 128 make 16 bytes, whose base64url is the 21 characters, then
    # one character holding the two zero bits, then padding.
    return base64.urlsafe_b64encode((value << 2).to_bytes(16)).decode()[:21]


def from_wire(wire_id: str) -> str | None:
    """The AgentCore session id a wire id stands for, or None for a malformed one."""
    if not ids.is_session_id(wire_id):
        return None
    value = int.from_bytes(base64.urlsafe_b64decode(wire_id + "A==")) >> 2
    return base64.b32encode(value.to_bytes(20)).decode().translate(_TO_CROCKFORD)[-ULID_CHARS:]
