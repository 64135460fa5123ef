"""LibreChat v0.8.6+ (G2): the tokens it signs for the code API, and a deployment's
settings that verify them beside the service key."""

from __future__ import annotations

import time
import uuid

from codeexec.settings import Settings

from .tokens import Issuer

KID = "lc-codeapi-2026-05"  # LibreChat's default kid for the code API token
TENANT = "tenant-1"
USER = "64f0c0ffee0000000000abcd"


def librechat_token(issuer: Issuer, kid: str = KID, tenant: str = TENANT, sub: str = USER) -> str:
    """The claims LibreChat (packages/api/src/auth/codeapi.ts) signs for the code API."""
    now = int(time.time())
    return issuer.token(
        kid,
        tenant,
        iss="librechat",
        aud="codeapi",
        sub=sub,
        iat=now,
        nbf=now,
        exp=now + 300,
        jti=str(uuid.uuid4()),
        role="USER",
        principal_source="librechat_jwt",
        auth_context_hash="0" * 64,
    )


def g2_settings(settings: Settings, issuer: Issuer, modes: str = "key,jwt") -> Settings:
    return settings.model_copy(
        update={
            "code_exec_auth_modes": frozenset(modes.split(",")),
            "code_exec_jwt_jwks_url": issuer.url,
            "code_exec_jwt_issuer": "librechat",
            "code_exec_jwt_audience": "codeapi",
        }
    )
