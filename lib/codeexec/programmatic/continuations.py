"""Continuation tokens: what a client holds between two rounds, signed (HMAC-SHA256) and
bound to its caller.

The claims carry what the next round must not take from anywhere a program can write:
the workflow and its session, the caller, the round it continues and the calls made so
far (both counted here, against MAX_ROUNDS and MAX_CALLS), the round's time limit as the
client asked for it (capped by the settings at every round), the calls the round asked
the client for, and the digest of the record the service kept with that round. So a
record a program rewrote does not verify, a spent token finds a later record, and a
token of another caller, or a forged one, is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import BadRequest, Conflict, Forbidden
from ..sandbox.port import OwnerTag

TOKEN_SECONDS = 3600  # a client runs its tools between two rounds: minutes at most


@dataclass(frozen=True)
class Claims:
    workflow: str
    session: str
    org: str
    user: str
    round: int  # the round that asked; the next is round + 1
    calls: int  # tool calls asked so far, these included
    timeout: float  # seconds, as the client asked at the start
    record: str  # the digest of the record kept with the round
    pending: list[dict[str, Any]]  # the calls the round asked for: {id, name, input}
    issued: int = 0


class Tokens:
    def __init__(self, secret: Callable[[], bytes | None]) -> None:
        # Read at the first token, not at start: on Lambda with SnapStart nothing secret
        # or unique may be made before the snapshot.
        self._secret = secret
        self._cached: bytes | None = None

    @property
    def _key(self) -> bytes:
        if self._cached is None:
            # No secret configured: one of this process's own (tokens then continue only
            # in this process, as the embedded server is).
            secret = self._secret() or secrets.token_bytes(32)
            self._cached = hashlib.sha256(b"codeexec continuation tokens\0" + secret).digest()
        return self._cached

    def issue(self, claims: Claims) -> str:
        stamped = {**asdict(claims), "issued": int(time.time())}
        body = base64.urlsafe_b64encode(json.dumps(stamped, separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def verify(self, token: str, owner: OwnerTag) -> Claims:
        body, _, signature = token.partition(".")
        if not hmac.compare_digest(signature, self._sign(body)):
            raise BadRequest("the continuation token is not one this service issued")
        claims = Claims(**json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
        if (claims.org, claims.user) != (owner.org, owner.user):
            raise Forbidden("the continuation token belongs to another caller")
        if time.time() > claims.issued + TOKEN_SECONDS:
            raise Conflict("the continuation token has expired: start the program again")
        return claims

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
