"""Signing keys made in a test, their key set in a file, and tokens signed with them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://iam.example.test"
AUDIENCE = "codeexec"


class Issuer:
    """Signing keys made in the test, their public halves published as a JSON Web Key Set
    in a file, and tokens signed with them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, tuple[str, Any]] = {}

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def add_key(self, kid: str, alg: str) -> None:
        private = {
            "RS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ES256": lambda: ec.generate_private_key(ec.SECP256R1()),
            "EdDSA": ed25519.Ed25519PrivateKey.generate,
        }[alg]()
        self.keys[kid] = (alg, private)
        self.publish()

    def remove_key(self, kid: str) -> None:
        del self.keys[kid]
        self.publish()

    def publish(self) -> None:
        jwks = [self.public_jwk(kid) for kid in self.keys]
        self.path.write_text(json.dumps({"keys": jwks}))

    def public_jwk(self, kid: str) -> dict[str, Any]:
        alg, private = self.keys[kid]
        to_jwk = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}[alg].to_jwk
        return to_jwk(private.public_key(), as_dict=True) | {"kid": kid, "alg": alg, "use": "sig"}

    def private_pem(self, kid: str) -> str:
        return (
            self.keys[kid][1]
            .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            .decode()
        )

    def claims(self, org: str = "org-a", **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "user-1", "iat": now, "nbf": now, "exp": now + 300}
        return {**base, "tenant_id": org, **overrides}

    def token(self, kid: str, org: str = "org-a", **overrides: Any) -> str:
        alg, private = self.keys[kid]
        claims = {k: v for k, v in self.claims(org, **overrides).items() if v is not None}
        return jwt.encode(claims, private, algorithm=alg, headers={"kid": kid})
