"""The key pair LibreChat signs its code API tokens with, and both sides' settings for it;
and named service keys.

    python -m codeexec.keys [--base-url URL] [--env-file LIBRECHAT_ENV] [--only SIDE]
                                                      (what `make librechat-keys` runs)
    python -m codeexec.keys service-key NAME [--org ORG] [--runs-at-once N]
                            [--runs-per-minute N] [--stored-bytes N]
                                                      a new service key, and its line for
                                                      CODE_EXEC_API_KEYS_FILE (service_keys.py)

LibreChat v0.8.6+ (packages/api/src/auth/codeapi.ts) signs each token itself with the
private key in CODEAPI_JWT_PRIVATE_KEY_BASE64 (the PKCS#8 PEM in base64; EdDSA unless
CODEAPI_JWT_ALGORITHM=RS256), and sends it only when CODEAPI_AUTH_PROVIDER is
`librechat-jwt`. This service needs the public half alone (CODE_EXEC_JWT_PUBLIC_KEY).
With CODEAPI_JWT_PRIVATE_KEY_BASE64 already in the environment (or in LibreChat's .env,
--env-file), that key is kept (its public half derived), so a LibreChat already set up
needs no change; otherwise a new Ed25519 pair is made. The output is two .env blocks, or
one side's (--only); comments start with `#`.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import secrets
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from dotenv import dotenv_values
from pydantic import ValidationError

from .service_keys import ServiceKey, key_hash

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


def settings(key: PrivateKeyTypes, kid: str, base_url: str, only: str | None = None) -> str:
    """Both sides' settings for one key pair (or `only` one side's), as .env lines."""
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
    blocks = {"librechat": librechat, "codeexec": service}
    return "\n\n".join("\n".join(lines) for side, lines in blocks.items() if only in (None, side)) + "\n"


def service_key(argv: list[str]) -> int:
    """A new key for X-API-Key, printed once (only its hash is kept), and its line."""
    parser = argparse.ArgumentParser(prog="python -m codeexec.keys service-key", description=service_key.__doc__)
    parser.add_argument("name", help="what the console, the metrics and the logs call it")
    parser.add_argument("--org", help="the organization its callers' sessions belong to (default: CODE_EXEC_ORG)")
    parser.add_argument("--runs-at-once", type=int, help="its runs in flight at once, at most (each replica)")
    parser.add_argument("--runs-per-minute", type=int, help="its runs started a minute, at most (each replica)")
    parser.add_argument("--stored-bytes", type=int, help="its organization's sessions' bytes together, at most")
    args = parser.parse_args(argv)
    key = secrets.token_urlsafe(32)
    limits = {"org": args.org, "runs_at_once": args.runs_at_once, "runs_per_minute": args.runs_per_minute,
              "stored_bytes": args.stored_bytes}  # fmt: skip
    try:
        line = ServiceKey(name=args.name, sha256=key_hash(key), **{k: v for k, v in limits.items() if v is not None})
    except ValidationError as exc:
        print(f"codeexec.keys: {'; '.join(str(e['msg']) for e in exc.errors())}", file=sys.stderr)
        return 2
    sys.stdout.write(
        f"# the key, for LibreChat's LIBRECHAT_CODE_API_KEY (shown once: the file keeps its hash only)\n{key}\n"
        f"# its line, for CODE_EXEC_API_KEYS_FILE\n{line.model_dump_json(exclude_none=True)}\n"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["service-key"]:
        return service_key(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m codeexec.keys", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--private-key-base64",
        help=f"LibreChat's existing key (default: ${PRIVATE_KEY_VARIABLE}; unset: a new Ed25519 key)",
    )
    parser.add_argument("--env-file", help=f"LibreChat's .env, to take its {PRIVATE_KEY_VARIABLE} and kid from")
    parser.add_argument("--kid", help=f"default: ${KID_VARIABLE}, else LibreChat's default {DEFAULT_KID}")
    parser.add_argument(
        "--base-url",
        default=DEFAULT_BASE_URL,
        help=f"this service's /v1 URL as LibreChat reaches it (default: {DEFAULT_BASE_URL})",
    )
    parser.add_argument("--only", choices=("librechat", "codeexec"), help="print one side's settings")
    args = parser.parse_args(argv)
    known = {**os.environ, **(dotenv_values(args.env_file) if args.env_file else {})}
    try:
        key = private_key(args.private_key_base64 or known.get(PRIVATE_KEY_VARIABLE))
    except ValueError as exc:
        print(f"codeexec.keys: {exc}", file=sys.stderr)
        return 2
    kid = args.kid or known.get(KID_VARIABLE) or DEFAULT_KID
    sys.stdout.write(settings(key, kid, args.base_url, args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
