"""Bearer tokens: verify a JWT against a JSON Web Key Set and name the organization it is for.

PyJWT does the work, because its PyJWKClient is made for exactly this: it fetches the key
set over https and caches it, picks the key by the token's `kid`, fetches the set again
once when a `kid` is unknown (so a rotated key works at once), with a cooldown so a flood
of invented `kid`s cannot hammer the issuer; and it binds every key to its own algorithm,
so a token cannot choose how it is checked. A key set in a file (a mounted secret) is read
the same way by `_FileKeys`, since PyJWKClient fetches only over HTTP. The allow-list never
holds `none` or an HMAC algorithm (settings refuse them): a public key is no HMAC secret.

A public key can also be given as it is (CODE_EXEC_JWT_PUBLIC_KEY: a PEM, the PEM in
base64, or a key set's JSON; `_GivenKeys`): what a LibreChat self-hoster has, the other
half of its CODEAPI_JWT_PRIVATE_KEY_BASE64. A key given without a `kid` checks tokens of
any `kid`, since LibreChat's kid is only a label of its own configuration.

Tokens are never logged, and no reason given back quotes one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
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

    def __init__(self, reason: str, expired: bool = False) -> None:
        super().__init__(reason)
        self.expired = expired  # the one failure a client fixes by asking for a new token


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


class _GivenKeys:
    """Keys given in the settings: the one of the token's `kid`, else the one without a kid."""

    def __init__(self, keys: PyJWKSet) -> None:
        self._keys = keys

    def get_signing_key_from_jwt(self, token: str) -> PyJWK:
        import jwt

        kid = jwt.get_unverified_header(token).get("kid")
        found = _by_kid(self._keys, kid) or next((key for key in self._keys.keys if not key.key_id), None)
        if found is None:
            raise jwt.PyJWKClientError("no key matches the token's kid")
        return found


PUBLIC_KEY_SETTING = "CODE_EXEC_JWT_PUBLIC_KEY"


def given_keys(value: str) -> PyJWKSet:
    """The key set a CODE_EXEC_JWT_PUBLIC_KEY names, or ValueError with a sentence that says
    what is wrong with it (never quoting it)."""
    import jwt

    text = value.strip()
    if not text.startswith(("{", "-----")):
        try:
            text = base64.b64decode(text, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError(f"{PUBLIC_KEY_SETTING} is neither a PEM, a base64 PEM nor a JSON key set") from None
    if "PRIVATE KEY" in text:
        raise ValueError(
            f"{PUBLIC_KEY_SETTING} holds a private key: give this service the public half only "
            "(`python -m codeexec.keys` prints it)"
        )
    try:
        if text.startswith("{"):
            loaded = json.loads(text)
            return jwt.PyJWKSet.from_dict(loaded if "keys" in loaded else {"keys": [loaded]})
        return jwt.PyJWKSet([_jwk_of_pem(text.encode())])
    except (ValueError, TypeError, jwt.PyJWKError, jwt.PyJWKSetError) as exc:
        raise ValueError(f"{PUBLIC_KEY_SETTING} is not a usable public key (an Ed25519, RSA or EC key)") from exc


def _jwk_of_pem(pem: bytes) -> dict[str, Any]:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

    key = load_pem_public_key(pem)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return OKPAlgorithm.to_jwk(key, as_dict=True)
    if isinstance(key, rsa.RSAPublicKey):
        return RSAAlgorithm.to_jwk(key, as_dict=True)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return ECAlgorithm.to_jwk(key, as_dict=True)
    raise ValueError("not an Ed25519, RSA or EC key")


class TokenVerifier:
    def __init__(
        self,
        jwks_url: str | None,
        issuer: str,
        audience: str,
        org_claim: str,
        algorithms: Iterable[str],
        refresh_cooldown: float = REFRESH_COOLDOWN_SECONDS,
        public_key: str | None = None,
    ) -> None:
        """Keys from `public_key` (CODE_EXEC_JWT_PUBLIC_KEY) when given, else from `jwks_url`."""
        import jwt

        url = urlsplit(jwks_url or "")
        self._keys: _Keys
        if public_key:
            self._keys = _GivenKeys(given_keys(public_key))
        elif url.scheme == "file":
            self._keys = _FileKeys(Path(url2pathname(url.path)))
        else:
            self._keys = jwt.PyJWKClient(
                jwks_url or "",
                lifespan=KEY_SET_TTL_SECONDS,
                timeout=FETCH_TIMEOUT_SECONDS,
                cooldown_duration=refresh_cooldown,
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
            raise InvalidToken(_reason(exc), expired=isinstance(exc, jwt.ExpiredSignatureError)) from exc
        org = claims.get(self._org_claim)
        if not isinstance(org, str) or not org:
            raise InvalidToken(f"the bearer token has no '{self._org_claim}' claim naming an organization")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            # Naming no user, it would be a key holder naming none: the organization's own
            # server, which reads and changes every session of the organization.
            raise InvalidToken("the bearer token has no 'sub' claim naming its user")
        return Identity(org, sub)


KEY_MISMATCH = (
    "the bearer token's signature does not verify: it was signed with another key than the one "
    "this service checks with (or altered); "
    "LibreChat's CODEAPI_JWT_PRIVATE_KEY_BASE64 and this service's CODE_EXEC_JWT_PUBLIC_KEY "
    "(or key set) must be the two halves of one key pair (see docs/librechat.md)"
)


def _reason(exc: Exception) -> str:
    """A fixed reason by kind of failure: PyJWT's own messages may quote parts of the token."""
    import jwt

    reasons: list[tuple[type[Exception], str]] = [
        (jwt.ExpiredSignatureError, "the bearer token has expired"),
        (jwt.ImmatureSignatureError, "the bearer token is not valid yet"),
        (jwt.InvalidIssuerError, "the bearer token's issuer is not the configured one"),
        (jwt.InvalidAudienceError, "the bearer token's audience is not the configured one"),
        (jwt.InvalidSignatureError, KEY_MISMATCH),
        (jwt.InvalidAlgorithmError, "the bearer token's algorithm is not allowed for its key"),
        (jwt.MissingRequiredClaimError, "the bearer token lacks a required claim (exp, iss or aud)"),
        (jwt.PyJWKClientError, "no key of the key set matches the bearer token's kid"),
    ]
    return next((reason for kind, reason in reasons if isinstance(exc, kind)), "the bearer token is malformed")
