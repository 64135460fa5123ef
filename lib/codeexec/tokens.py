"""Bearer tokens: verify a JWT against a JSON Web Key Set and name the organization it is for.

PyJWT does the work, because its PyJWKClient is made for exactly this: it fetches the key
set over https and caches it, picks the key by the token's `kid`, fetches the set again
once when a `kid` is unknown (so a rotated key works at once), with a cooldown so a flood
of invented `kid`s cannot hammer the issuer; and it binds every key to its own algorithm,
so a token cannot choose how it is checked. A key set in a file (a mounted secret) is read
the same way by `_FileKeys`, since PyJWKClient fetches only over HTTP. The allow-list never
holds `none` or an HMAC algorithm (settings refuse them): a public key is no HMAC secret.

Tokens are never logged, and no reason given back quotes one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit
from urllib.request import url2pathname

from .errors import KeysUnavailable

# PyJWT (and cryptography under it) is imported in the functions that check a token, so
# a deployment without token checking does not pay for it at every cold start.
if TYPE_CHECKING:
    from jwt import PyJWK, PyJWKSet

LEEWAY_SECONDS = 30  # clock skew between the issuer and this service
KEY_SET_TTL_SECONDS = 300
REFRESH_COOLDOWN_SECONDS = 30.0
FETCH_TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class Identity:
    org: str
    user: str  # the token's `sub`, never empty


class InvalidToken(Exception):
    """A token is present but not acceptable (401). The message is the reason."""


class _Keys(Protocol):
    def get_signing_key_from_jwt(self, token: str) -> PyJWK: ...


class _FileKeys:
    """A key set on disk: read once, and again when a token's `kid` is not in it."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._keys: PyJWKSet | None = None

    def get_signing_key_from_jwt(self, token: str) -> PyJWK:
        import jwt

        kid = jwt.get_unverified_header(token).get("kid")
        found = _by_kid(self._keys, kid) if self._keys is not None else None
        if found is None:  # first use, or a rotated key: read the file again
            self._keys = jwt.PyJWKSet.from_json(self._path.read_text())
            found = _by_kid(self._keys, kid)
        if found is None:
            raise jwt.PyJWKClientError("no key matches the token's kid")
        return found


def _by_kid(keys: PyJWKSet, kid: object) -> PyJWK | None:
    return next((key for key in keys.keys if kid and key.key_id == kid), None)


class TokenVerifier:
    def __init__(
        self,
        jwks_url: str,
        issuer: str,
        audience: str,
        org_claim: str,
        algorithms: Iterable[str],
        refresh_cooldown: float = REFRESH_COOLDOWN_SECONDS,
    ) -> None:
        import jwt

        url = urlsplit(jwks_url)
        self._keys: _Keys = (
            _FileKeys(Path(url2pathname(url.path)))
            if url.scheme == "file"
            else jwt.PyJWKClient(
                jwks_url,
                lifespan=KEY_SET_TTL_SECONDS,
                timeout=FETCH_TIMEOUT_SECONDS,
                cooldown_duration=refresh_cooldown,
            )
        )
        self._issuer = issuer
        self._audience = audience
        self._org_claim = org_claim
        self._algorithms = sorted(algorithms)

    def verify(self, token: str) -> Identity:
        """Who the token names: its organization and its user (`sub`), or InvalidToken /
        KeysUnavailable."""
        import jwt

        try:
            key = self._keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                issuer=self._issuer,
                audience=self._audience,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except (jwt.PyJWKClientConnectionError, jwt.PyJWKSetError, json.JSONDecodeError, OSError) as exc:
            raise KeysUnavailable("the key set (CODE_EXEC_JWT_JWKS_URL) is unreachable or unusable") from exc
        except (jwt.PyJWKClientError, jwt.InvalidTokenError) as exc:
            raise InvalidToken(_reason(exc)) from exc
        org = claims.get(self._org_claim)
        if not isinstance(org, str) or not org:
            raise InvalidToken(f"the bearer token has no '{self._org_claim}' claim naming an organization")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            # Naming no user, it would be a key holder naming none: the organization's own
            # server, which reads and changes every session of the organization.
            raise InvalidToken("the bearer token has no 'sub' claim naming its user")
        return Identity(org, sub)


def _reason(exc: Exception) -> str:
    """A fixed reason by kind of failure: PyJWT's own messages may quote parts of the token."""
    import jwt

    reasons: list[tuple[type[Exception], str]] = [
        (jwt.ExpiredSignatureError, "the bearer token has expired"),
        (jwt.ImmatureSignatureError, "the bearer token is not valid yet"),
        (jwt.InvalidIssuerError, "the bearer token's issuer is not the configured one"),
        (jwt.InvalidAudienceError, "the bearer token's audience is not the configured one"),
        (jwt.InvalidSignatureError, "the bearer token's signature does not verify"),
        (jwt.InvalidAlgorithmError, "the bearer token's algorithm is not allowed for its key"),
        (jwt.MissingRequiredClaimError, "the bearer token lacks a required claim (exp, iss or aud)"),
        (jwt.PyJWKClientError, "no key of the key set matches the bearer token's kid"),
    ]
    return next((reason for kind, reason in reasons if isinstance(exc, kind)), "the bearer token is malformed")
