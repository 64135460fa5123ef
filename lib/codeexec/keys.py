"""The key pair LibreChat signs its code API tokens with, and both sides' settings for it.

    python -m codeexec.keys [--base-url URL]          (what `make librechat-keys` runs)

LibreChat v0.8.6+ (packages/api/src/auth/codeapi.ts) signs each token itself with the
private key in CODEAPI_JWT_PRIVATE_KEY_BASE64 (the PKCS#8 PEM in base64; EdDSA unless
CODEAPI_JWT_ALGORITHM=RS256), and sends it only when CODEAPI_AUTH_PROVIDER is
`librechat-jwt`. This service needs the public half alone (CODE_EXEC_JWT_PUBLIC_KEY).
With CODEAPI_JWT_PRIVATE_KEY_BASE64 already in the environment, that key is kept (its
public half derived), so a LibreChat already set up needs no change; otherwise a new
Ed25519 pair is made. The output is two .env blocks; comments start with `#`.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

PRIVATE_KEY_VARIABLE = "CODEAPI_JWT_PRIVATE_KEY_BASE64"
KID_VARIABLE = "CODEAPI_JWT_KID"
DEFAULT_KID = "lc-codeapi-2026-05"  # LibreChat's own default
# The service's address from LibreChat's container, both in one compose project.
DEFAULT_BASE_URL = "http://codeexec:8000/v1"


def private_key(encoded: str | None) -> PrivateKeyTypes:
    """LibreChat's key from its base64 PEM, or a new Ed25519 key; ValueError with a
    sentence (never the key) when the given one is not usable."""
    if not encoded:
        return ed25519.Ed25519PrivateKey.generate()
    try:
        pem = base64.b64decode(encoded.strip(), validate=True)
        key = serialization.load_pem_private_key(pem.replace(b"\\n", b"\n"), password=None)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ValueError(f"{PRIVATE_KEY_VARIABLE} is not a base64 PEM private key without a password") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey):
        raise ValueError(f"{PRIVATE_KEY_VARIABLE} is neither an Ed25519 nor an RSA key (LibreChat signs with no other)")
    return key


def settings(key: PrivateKeyTypes, kid: str, base_url: str) -> str:
    """Both sides' settings for one key pair, as .env lines."""
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    librechat = [
        "# LibreChat's .env: it signs a token for every code API call with this key",
        "CODEAPI_AUTH_PROVIDER=librechat-jwt",
        f"{PRIVATE_KEY_VARIABLE}={base64.b64encode(private_pem).decode()}",
        f"{KID_VARIABLE}={kid}",
        f"LIBRECHAT_CODE_BASEURL={base_url}",
    ]
    if isinstance(key, rsa.RSAPrivateKey):
        librechat.append("CODEAPI_JWT_ALGORITHM=RS256")
    service = [
        "# this service's environment (codeexec): the public half only; the issuer",
        "# (librechat), audience (codeapi) and tenant claim (tenant_id) are LibreChat's defaults",
        f"CODE_EXEC_JWT_PUBLIC_KEY={base64.b64encode(public_pem).decode()}",
    ]
    return "\n".join([*librechat, "", *service]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codeexec.keys", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--private-key-base64",
        default=os.environ.get(PRIVATE_KEY_VARIABLE),
        help=f"LibreChat's existing key (default: ${PRIVATE_KEY_VARIABLE}; unset: a new Ed25519 key)",
    )
    parser.add_argument("--kid", default=os.environ.get(KID_VARIABLE) or DEFAULT_KID)
    parser.add_argument(
        "--base-url",
        default=DEFAULT_BASE_URL,
        help=f"this service's /v1 URL as LibreChat reaches it (default: {DEFAULT_BASE_URL})",
    )
    args = parser.parse_args(argv)
    try:
        key = private_key(args.private_key_base64)
    except ValueError as exc:
        print(f"codeexec.keys: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(settings(key, args.kid, args.base_url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
