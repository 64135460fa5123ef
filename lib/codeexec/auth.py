"""Who is calling, and for which organization.

The gateway in front does not check credentials: this service does. The key is an opaque
service key in `X-API-Key`, compared in constant time. With no key configured the service
FAILS CLOSED: every route but /health answers 401.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping


class Unauthorized(Exception):
    pass


class Authenticator:
    def __init__(self, api_key: Callable[[], str | None], org: str) -> None:
        # A callable, so a deployment can read the key from a secret store lazily, once.
        self._api_key = api_key
        self._org = org

    def configured(self) -> bool:
        return bool(self._api_key())

    def org_for(self, headers: Mapping[str, str]) -> str:
        """The organization the caller's sessions belong to, or Unauthorized."""
        expected = self._api_key()
        if not expected:
            raise Unauthorized("the service has no API key configured (CODE_EXEC_API_KEY)")
        given = headers.get("x-api-key", "")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise Unauthorized("missing or wrong X-API-Key")
        return self._org
