"""Bearer tokens: the verifier against key sets made in the test, served from a file and
from a loopback HTTP server (`tests/helpers/tokens.py` makes the keys and tokens)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from pydantic import ValidationError

from codeexec.bearer_tokens import InvalidToken, KeysUnavailable, TokenVerifier
from codeexec.settings import Settings

from ..helpers.tokens import AUDIENCE, ISSUER, Issuer


class KeySetServer:
    """Serves the issuer's key set file on loopback and counts the fetches."""

    def __init__(self, issuer: Issuer) -> None:
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
                outer.fetches += 1
                body = issuer.path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key("rsa-1", "RS256")
    return made


@pytest.fixture
def key_server(issuer: Issuer) -> Iterator[KeySetServer]:
    server = KeySetServer(issuer)
    yield server
    server.close()


def verifier(url: str, **options: Any) -> TokenVerifier:
    return TokenVerifier(url, ISSUER, AUDIENCE, "tenant_id", ["RS256", "ES256", "EdDSA"], **options)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_each_algorithm_names_the_org(issuer: Issuer) -> None:
    issuer.add_key("ec-1", "ES256")
    issuer.add_key("ed-1", "EdDSA")
    check = verifier(issuer.url)
    for kid, org in (("rsa-1", "org-rsa"), ("ec-1", "org-ec"), ("ed-1", "org-ed")):
        assert check.verify(issuer.token(kid, org)).org == org


def test_key_set_over_loopback_http_is_fetched_once_and_cached(issuer: Issuer, key_server: KeySetServer) -> None:
    check = verifier(key_server.url)
    assert check.verify(issuer.token("rsa-1", "org-a")).org == "org-a"
    assert check.verify(issuer.token("rsa-1", "org-b")).org == "org-b"
    assert key_server.fetches == 1


def test_a_rotated_key_is_fetched_when_its_kid_first_appears(issuer: Issuer, key_server: KeySetServer) -> None:
    check = verifier(key_server.url, refresh_cooldown=0)
    old = issuer.token("rsa-1")
    assert check.verify(old).org == "org-a"
    issuer.add_key("rsa-2", "RS256")
    issuer.remove_key("rsa-1")
    assert check.verify(issuer.token("rsa-2", "org-new")).org == "org-new"
    assert key_server.fetches == 2
    with pytest.raises(InvalidToken, match="kid"):  # the retired key is gone from the set
        check.verify(old)


def test_a_rotated_key_in_a_file_is_read_when_its_kid_first_appears(issuer: Issuer) -> None:
    check = verifier(issuer.url)
    old = issuer.token("rsa-1")
    assert check.verify(old).org == "org-a"
    issuer.add_key("ed-2", "EdDSA")
    issuer.remove_key("rsa-1")
    assert check.verify(issuer.token("ed-2", "org-new")).org == "org-new"
    with pytest.raises(InvalidToken, match="kid"):
        check.verify(old)


def test_unknown_kids_do_not_refetch_within_the_cooldown(issuer: Issuer, key_server: KeySetServer) -> None:
    check = verifier(key_server.url)
    check.verify(issuer.token("rsa-1"))
    issuer.add_key("invented", "RS256")
    for _ in range(5):
        with pytest.raises(InvalidToken, match="kid"):
            check.verify(issuer.token("invented"))
    assert key_server.fetches == 1


def test_expiry_has_a_small_leeway(issuer: Issuer) -> None:
    check = verifier(issuer.url)
    now = int(time.time())
    assert check.verify(issuer.token("rsa-1", exp=now - 5)).org == "org-a"
    with pytest.raises(InvalidToken, match="expired"):
        check.verify(issuer.token("rsa-1", exp=now - 600))
    with pytest.raises(InvalidToken, match="not valid yet"):
        check.verify(issuer.token("rsa-1", nbf=now + 600))
    with pytest.raises(InvalidToken, match="exp"):
        check.verify(issuer.token("rsa-1", exp=None))


def test_wrong_issuer_or_audience_is_refused(issuer: Issuer) -> None:
    check = verifier(issuer.url)
    with pytest.raises(InvalidToken, match="issuer"):
        check.verify(issuer.token("rsa-1", iss="https://other.example.test"))
    with pytest.raises(InvalidToken, match="audience"):
        check.verify(issuer.token("rsa-1", aud="another-service"))


def test_alg_none_is_refused(issuer: Issuer) -> None:
    header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    unsigned = f"{header}.{b64(json.dumps(issuer.claims()).encode())}."
    with pytest.raises(InvalidToken, match="algorithm"):
        verifier(issuer.url).verify(unsigned)


def test_hs256_signed_with_the_public_key_is_refused(issuer: Issuer) -> None:
    # The classic confusion: the public key (which anyone has) used as an HMAC secret.
    public_pem = issuer.keys["rsa-1"][1].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    signing_input = f"{header}.{b64(json.dumps(issuer.claims()).encode())}"
    signature = b64(hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest())
    with pytest.raises(InvalidToken, match="algorithm"):
        verifier(issuer.url).verify(f"{signing_input}.{signature}")


def test_a_tampered_payload_is_refused(issuer: Issuer) -> None:
    header, _, signature = issuer.token("rsa-1", "org-a").split(".")
    forged = b64(json.dumps(issuer.claims("org-b")).encode())
    with pytest.raises(InvalidToken, match="signature"):
        verifier(issuer.url).verify(f"{header}.{forged}.{signature}")


def test_a_token_without_the_org_claim_is_refused(issuer: Issuer) -> None:
    with pytest.raises(InvalidToken, match="tenant_id"):
        verifier(issuer.url).verify(issuer.token("rsa-1", tenant_id=None))
    with pytest.raises(InvalidToken, match="tenant_id"):
        verifier(issuer.url).verify(issuer.token("rsa-1", tenant_id=""))


def test_garbage_is_malformed_and_the_reason_never_quotes_it(issuer: Issuer) -> None:
    with pytest.raises(InvalidToken) as refused:
        verifier(issuer.url).verify("not.a-secret-looking.token")
    assert "secret" not in str(refused.value)


def test_an_unreachable_or_broken_key_set_is_unavailable_not_invalid(issuer: Issuer, tmp_path: Path) -> None:
    with pytest.raises(KeysUnavailable):
        verifier("http://127.0.0.1:9/jwks.json").verify(issuer.token("rsa-1"))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(KeysUnavailable):
        verifier(broken.as_uri()).verify(issuer.token("rsa-1"))


def test_settings_refuse_unsafe_token_configuration() -> None:
    good = {"code_exec_jwt_issuer": ISSUER, "code_exec_jwt_audience": AUDIENCE}
    for bad in (
        {"code_exec_jwt_algorithms": "RS256,none"},
        {"code_exec_jwt_algorithms": "HS256"},
        {"code_exec_jwt_jwks_url": "http://iam.example.test/jwks.json", **good},
        {"code_exec_jwt_jwks_url": "https://iam.example.test/jwks.json"},  # no issuer/audience
        {"code_exec_auth_modes": "key,password"},
    ):
        with pytest.raises(ValidationError):
            Settings(**bad)
    ok = Settings(code_exec_jwt_jwks_url="https://iam.example.test/jwks.json", code_exec_auth_modes="key, jwt", **good)
    assert ok.code_exec_auth_modes == {"key", "jwt"}
