"""Who is calling, and for which organization: the one place auth is resolved, for both
generations of clients.

The gateway in front does not check credentials: this service does. Two modes
(CODE_EXEC_AUTH_MODES), each failing closed when it has nothing configured:

- `key`: an opaque service key in `X-API-Key`, compared in constant time. A bearer token
  beside it (hanzo.chat forwards the end user's IAM token) names the tenant when token
  verification is configured; without that configuration the deployment serves one
  tenant and the bearer is not a credential here.
- `jwt`: a valid bearer token alone (LibreChat v0.8.6+ sends nothing else).

The organization comes from a verified token or is the deployment's (CODE_EXEC_ORG), never
from the request body. The user is a verified token's `sub`; a key holder may name one in
the request (G1 LibreChat: the exec body's `user_id`, the upload's `User-Id`). A token that
is present but not valid is a 401, never a fall-back.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from .bearer_tokens import Identity, InvalidToken, TokenVerifier
from .errors import Unauthorized
from .sandbox.port import Owner
from .service_keys import DEFAULT_KEY, ServiceKey, ServiceKeys, key_hash
from .settings import Settings

DOCS_PAGE = "docs/librechat.md"  # the page that sets up both sides


@dataclass(frozen=True)
class Caller:
    """Who is calling: an organization, and one user of it.

    `user` is None for one caller only: a holder of the service key that names no user
    (LibreChat's own server fetching a download for one of its users, as G1 LibreChat
    does). It may read every session of its organization; it never lands a run in one
    that is not its own (see sandbox/port.py, Access)."""

    org: str
    user: str | None
    key: ServiceKey | None = None  # the named service key it came with (service_keys.py)

    def named(self, user: str | None) -> Caller:
        """The same caller acting for the user its request names, unless its credential
        named one already (a token's `sub` wins over a body or a header)."""
        return self if self.user is not None or not user else replace(self, user=user)

    @property
    def owner(self) -> Owner:
        return Owner(self.org, self.user or "")


class Authenticator:
    def __init__(
        self,
        api_key: Callable[[], str | None],
        org: str,
        modes: frozenset[str] = frozenset({"key"}),
        tokens: TokenVerifier | None = None,
        named_keys: ServiceKeys | None = None,
    ) -> None:
        # A callable, so a deployment can read the key from a secret store lazily, once.
        self._api_key = api_key
        self._org = org
        self._modes = modes
        self._tokens = tokens
        self._named_keys = named_keys

    @property
    def modes(self) -> list[str]:
        """For /health: the modes that accept something (a mode with nothing configured
        accepts nothing)."""
        on = {"key": bool(self._api_key() or self._named_keys), "jwt": self._tokens is not None}
        return sorted(mode for mode in self._modes if on[mode])

    def named_keys(self) -> list[ServiceKey]:
        """The file's keys, for the console (their names and limits, never their hashes' use)."""
        return self._named_keys.keys() if self._named_keys else []

    def status(self) -> str:
        """For /health: what this deployment accepts, or why it accepts nothing."""
        accepted = []
        if "key" in self._modes and (self._api_key() or self._named_keys):
            accepted.append("X-API-Key" + (" (+ tenant bearer token)" if self._tokens else ""))
        if "jwt" in self._modes and self._tokens:
            accepted.append("bearer token")
        return "accepts " + " or ".join(accepted) if accepted else "nothing configured: every route answers 401"

    def caller(self, headers: Mapping[str, str]) -> Caller:
        """Who is calling, or Unauthorized."""
        token = _bearer(headers)
        if "key" in self._modes and headers.get("x-api-key"):
            key = self._check_key(headers["x-api-key"])
            if token is not None and self._tokens:
                identity = self._verified(token)
                return Caller(identity.org, identity.user, key)
            return Caller(key.org or self._org, None, key)
        if "jwt" in self._modes and token is not None:
            identity = self._verified(token)
            return Caller(identity.org, identity.user)
        raise Unauthorized(self._what_to_change(bearer=token is not None), reason="missing")

    def _what_to_change(self, bearer: bool) -> str:
        """Why a call without a usable credential is refused, naming the settings of both
        sides to change, never their values."""
        if bearer:  # a bearer alone, and this deployment does not take one alone
            told = (
                "this service does not take a bearer token alone: set CODE_EXEC_JWT_PUBLIC_KEY "
                "(or add jwt to CODE_EXEC_AUTH_MODES)"
            )
        elif "jwt" in self._modes and self._tokens:
            told = (
                "no credentials: LibreChat v0.8.6+ sends its bearer token only when its .env sets "
                "CODEAPI_AUTH_PROVIDER=librechat-jwt and CODEAPI_JWT_PRIVATE_KEY_BASE64"
            )
        else:
            told = (
                "no credentials: LibreChat v0.8.6+ sends no X-API-Key, only a bearer token it signs "
                "(its .env: CODEAPI_AUTH_PROVIDER=librechat-jwt); set this service's CODE_EXEC_JWT_PUBLIC_KEY"
            )
        return f"{told} (`python -m codeexec.keys` prints both sides' settings; see {DOCS_PAGE})"

    def _check_key(self, given: str) -> ServiceKey:
        """The key given: one of the file's, or CODE_EXEC_API_KEY (named `default`, with no
        limits of its own); else Unauthorized."""
        named = self._named_keys.find(given) if self._named_keys else None
        if named is not None:
            return named
        expected = self._api_key()
        if not expected and not self._named_keys:
            said = "the service has no API key configured (CODE_EXEC_API_KEY or CODE_EXEC_API_KEYS_FILE)"
            raise Unauthorized(said, reason="no_key_configured")
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise Unauthorized("wrong X-API-Key", reason="bad_key")
        return ServiceKey(name=DEFAULT_KEY, sha256=key_hash(expected))

    def _verified(self, token: str) -> Identity:
        if self._tokens is None:
            raise Unauthorized(
                "this service verifies no bearer tokens: set CODE_EXEC_JWT_PUBLIC_KEY (or CODE_EXEC_JWT_JWKS_URL) "
                "to the public half of LibreChat's CODEAPI_JWT_PRIVATE_KEY_BASE64 "
                f"(`python -m codeexec.keys` prints both sides' settings; see {DOCS_PAGE})",
                reason="bearer_not_accepted",
            )
        try:
            return self._tokens.verify(token)
        except InvalidToken as exc:
            raise Unauthorized(str(exc), reason="expired_token" if exc.expired else "bad_token") from exc


def make_authenticator(settings: Settings, api_key: Callable[[], str | None]) -> Authenticator:
    tokens = None
    if settings.code_exec_jwt_jwks_url or settings.code_exec_jwt_public_key:
        tokens = TokenVerifier(
            settings.code_exec_jwt_jwks_url,
            settings.jwt_issuer,
            settings.jwt_audience,
            settings.code_exec_jwt_org_claim,
            settings.code_exec_jwt_algorithms,
            public_key=settings.code_exec_jwt_public_key,
        )
    named_keys = ServiceKeys(settings.code_exec_api_keys_file) if settings.code_exec_api_keys_file else None
    return Authenticator(api_key, settings.code_exec_org, settings.auth_modes, tokens, named_keys)


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None
