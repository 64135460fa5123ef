"""docs/librechat.md, done as a self-hoster does it: the keys command prints both sides'
settings, this service starts from its half alone, and the REAL @librechat/agents 3.9.2
tool, configured by LibreChat's half alone, runs through it. And what a wrong set-up is
told: which settings to change, never a key."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from fastapi.testclient import TestClient
from pydantic import ValidationError

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..helpers.librechat import CLIENTS, both_sides, drive_with_env, keys_command
from ..serving import Services, serving

USER = "64f0c0ffee0000000000abcd"
DOCS = Path(__file__).parents[2] / "docs" / "librechat.md"


def _pem(key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


def _token(private_pem: bytes, kid: str = "lc-codeapi-2026-05", **claims: object) -> str:
    """A token with LibreChat's claims (packages/api/src/auth/codeapi.ts)."""
    now = int(time.time())
    body = {"iss": "librechat", "aud": "codeapi", "sub": USER, "iat": now, "nbf": now, "exp": now + 300,
            "jti": str(uuid.uuid4()), "tenant_id": "legacy", "role": "USER", **claims}  # fmt: skip
    key = serialization.load_pem_private_key(private_pem, password=None)
    alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "EdDSA"
    return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})  # type: ignore[arg-type]


@pytest.fixture
def sides() -> tuple[dict[str, str], dict[str, str]]:
    made = keys_command("--base-url", "http://placeholder/v1")
    assert made.returncode == 0, made.stderr
    return both_sides(made.stdout)


def test_the_keys_command_prints_librechats_env_and_this_services(sides: tuple[dict, dict]) -> None:
    librechat, service = sides
    assert librechat["CODEAPI_AUTH_PROVIDER"] == "librechat-jwt"
    assert librechat["CODEAPI_JWT_KID"] == "lc-codeapi-2026-05"
    assert librechat["LIBRECHAT_CODE_BASEURL"] == "http://placeholder/v1"
    private = serialization.load_pem_private_key(base64.b64decode(librechat["CODEAPI_JWT_PRIVATE_KEY_BASE64"]), None)
    assert isinstance(private, ed25519.Ed25519PrivateKey)  # LibreChat's default algorithm, EdDSA
    public = base64.b64decode(service["CODE_EXEC_JWT_PUBLIC_KEY"])
    assert b"PRIVATE" not in public
    assert public == private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert list(service) == ["CODE_EXEC_JWT_PUBLIC_KEY"]  # one variable turns JWT on


@pytest.mark.parametrize("kind", ["ed25519", "rsa"])
def test_the_keys_command_keeps_librechats_existing_key(kind: str) -> None:
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else rsa.generate_private_key(65537, 2048)
    existing = base64.b64encode(_pem(key)).decode()
    made = keys_command(env={"CODEAPI_JWT_PRIVATE_KEY_BASE64": existing, "CODEAPI_JWT_KID": "my-kid"})
    assert made.returncode == 0, made.stderr
    librechat, service = both_sides(made.stdout)
    assert librechat["CODEAPI_JWT_PRIVATE_KEY_BASE64"] == existing
    assert librechat["CODEAPI_JWT_KID"] == "my-kid"
    assert librechat.get("CODEAPI_JWT_ALGORITHM") == ("RS256" if kind == "rsa" else None)
    # The printed half checks that key's tokens.
    verified = Settings(code_exec_jwt_public_key=service["CODE_EXEC_JWT_PUBLIC_KEY"])
    assert verified.auth_modes == {"key", "jwt"}
    assert (verified.jwt_issuer, verified.jwt_audience) == ("librechat", "codeapi")


def test_the_compose_steps_give_the_service_the_half_of_librechats_env_file(tmp_path: Path) -> None:
    """docs/librechat.md, "Beside LibreChat's compose file": LibreChat's half appended to
    its .env, then this service's derived from that file alone."""
    librechat_env = tmp_path / "librechat.env"
    librechat_env.write_text("MONGO_URI=mongodb://mongodb:27017/LibreChat\n")
    first = keys_command("--only", "librechat")
    assert first.returncode == 0, first.stderr
    assert "CODE_EXEC_JWT_PUBLIC_KEY" not in first.stdout
    librechat_env.write_text(librechat_env.read_text() + first.stdout)
    second = keys_command("--only", "codeexec", "--env-file", str(librechat_env))
    assert second.returncode == 0, second.stderr
    assert "CODEAPI_JWT_PRIVATE_KEY_BASE64" not in second.stdout  # nothing secret on this side
    service = dict(line.split("=", 1) for line in second.stdout.splitlines() if line[:1] not in ("#", ""))
    signed = dict(line.split("=", 1) for line in first.stdout.splitlines() if line[:1] not in ("#", ""))
    token = _token(base64.b64decode(signed["CODEAPI_JWT_PRIVATE_KEY_BASE64"]))
    key = serialization.load_pem_public_key(base64.b64decode(service["CODE_EXEC_JWT_PUBLIC_KEY"]))
    assert jwt.decode(token, key, algorithms=["EdDSA"], audience="codeapi")["sub"] == USER  # type: ignore[arg-type]


def test_the_page_shows_the_commands_and_settings_these_tests_run(sides: tuple[dict, dict]) -> None:
    page = DOCS.read_text()
    for command in ("make librechat-keys", "python -m codeexec.keys", "--only librechat", "--env-file"):
        assert command in page, command
    librechat, service = sides
    for variable in (*librechat, *service):
        assert f"{variable}=" in page, variable
    # The troubleshooting table quotes the client's own words (the installed 3.9.2 package).
    client = (CLIENTS / "node_modules/@librechat/agents/dist/esm/tools/CodeExecutor.mjs").read_text()
    for said in (
        "Code execution is not authorized. Verify access before trying again.",
        "Code execution is temporarily unavailable. Please retry.",
        "The code execution request was rejected. Please check the tool input and try again.",
    ):
        assert said in page and said in client, said


def test_the_keys_command_refuses_a_broken_key_without_quoting_it() -> None:
    made = keys_command("--private-key-base64", "bm90IGEga2V5")  # base64 of "not a key"
    assert made.returncode == 2
    assert "CODEAPI_JWT_PRIVATE_KEY_BASE64 is not a base64 PEM private key" in made.stderr
    assert "bm90IGEga2V5" not in made.stderr and "Traceback" not in made.stderr


def test_librechats_half_drives_the_real_client_through_this_services_half(
    settings: Settings, sides: tuple[dict, dict], services: Services
) -> None:
    librechat, service = sides
    app = create_app(
        services(settings.model_copy(update={"code_exec_jwt_public_key": service["CODE_EXEC_JWT_PUBLIC_KEY"]}))
    )
    with serving(app) as url:
        result = drive_with_env({**librechat, "LIBRECHAT_CODE_BASEURL": f"{url}/v1"})
    assert result["version"].startswith("3.9.")
    assert result["first"]["threw"] is False, result["first"]
    assert result["first"]["content"] == "stdout:\nfirst 42"
    # The same token again (LibreChat caches one up to 30 s): the same jti is no replay.
    assert result["reused"]["threw"] is False, result["reused"]
    assert result["reused"]["content"] == "stdout:\nreused 42"
    # LibreChat without CODEAPI_AUTH_PROVIDER sends nothing: the client's own words for a 401.
    assert result["unsigned"]["threw"] is True
    assert "not authorized" in result["unsigned"]["error"]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("not a key at all", "is neither a PEM, a base64 PEM nor a JSON key set"),
        (base64.b64encode(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n").decode(), "not a usable"),
        ('{"keys": [{"kty": "OKP"}]}', "not a usable"),
        ("private", "holds a private key"),
    ],
)
def test_a_malformed_public_key_refuses_to_start_naming_the_variable(value: str, said: str) -> None:
    if value == "private":
        value = base64.b64encode(_pem(ed25519.Ed25519PrivateKey.generate())).decode()
    with pytest.raises(ValidationError) as refused:
        Settings(code_exec_jwt_public_key=value)
    assert "CODE_EXEC_JWT_PUBLIC_KEY" in str(refused.value) and said in str(refused.value)
    # The server itself says it in one sentence, not a traceback, and quotes no key.
    env = {"PATH": os.environ["PATH"], "CODE_EXEC_JWT_PUBLIC_KEY": value, "PORT": "1"}
    server = [sys.executable, "-m", "codeexec.server"]
    started = subprocess.run(server, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert started.returncode != 0
    assert started.stderr.startswith("codeexec: CODE_EXEC_JWT_PUBLIC_KEY"), started.stderr
    assert "Traceback" not in started.stderr and value not in started.stderr


@pytest.mark.parametrize("form", ["pem", "base64", "jwks"])
def test_the_public_key_is_taken_as_pem_base64_pem_or_a_key_set(
    settings: Settings, form: str, services: Services
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    value = {
        "pem": pem.decode(),
        "base64": base64.b64encode(pem).decode(),
        "jwks": f'{{"keys": [{jwt.algorithms.OKPAlgorithm.to_jwk(key.public_key())}]}}',
    }[form]
    client = TestClient(create_app(services(settings.model_copy(update={"code_exec_jwt_public_key": value}))))
    answer = client.get("/v1/files/abcdefghijklmnopqrstu", headers={"Authorization": f"Bearer {_token(_pem(key))}"})
    assert answer.status_code == 404  # through auth: the session is not there


def test_a_401_says_what_to_change_on_both_sides_and_nothing_secret(
    settings: Settings, tmp_path: Path, services: Services
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    # What LibreChat v0.8.6+ meets at a service set up for G1 only (make serve before this page).
    g1_only = TestClient(create_app(services(settings)))
    assert g1_only.get("/health").json()["auth_modes"] == ["key"]
    for headers in ({}, {"Authorization": f"Bearer {_token(_pem(key))}"}):
        refused = g1_only.post("/v1/exec", json={"lang": "py", "code": "print(1)"}, headers=headers)
        assert refused.status_code == 401
        said = refused.json()["details"]
        assert "CODE_EXEC_JWT_PUBLIC_KEY" in said and "docs/librechat.md" in said, said
        assert "test-key" not in said
        assert said[:60] in DOCS.read_text(), said  # the page's troubleshooting table quotes it
    assert "CODEAPI_AUTH_PROVIDER=librechat-jwt" in g1_only.post("/v1/exec", json={}).json()["details"]

    both = TestClient(create_app(services(settings.model_copy(update={"code_exec_jwt_public_key": public.decode()}))))
    assert both.get("/health").json()["auth_modes"] == ["jwt", "key"]
    nothing = both.post("/v1/exec", json={"lang": "py", "code": "print(1)"}).json()["details"]
    assert "CODEAPI_AUTH_PROVIDER=librechat-jwt" in nothing and "docs/librechat.md" in nothing
    assert nothing[:60] in DOCS.read_text()
    # A token of another key pair: the key does not match, and which key is expected is not said.
    other = _pem(ed25519.Ed25519PrivateKey.generate())
    mismatch = both.post("/v1/exec", json={"lang": "py", "code": "print(1)"},
                         headers={"Authorization": f"Bearer {_token(other)}"})  # fmt: skip
    assert mismatch.status_code == 401
    said = mismatch.json()["details"]
    assert "signed with another key" in said and "CODE_EXEC_JWT_PUBLIC_KEY" in said
    assert said[:60] in DOCS.read_text()
    assert base64.b64encode(public).decode()[:40] not in said and "MCowBQYDK2Vw" not in said


def test_librechats_headers_and_a_reused_token_are_accepted(settings: Settings, services: Services) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    client = TestClient(create_app(services(settings.model_copy(update={"code_exec_jwt_public_key": public.decode()}))))
    headers = {
        "Authorization": f"Bearer {_token(_pem(key), code_worker_id='worker-7')}",
        "User-Agent": "LibreChat/1.0",
        "X-CodeAPI-Expected-Profile": "default",
        "X-LibreChat-Code-Request-ID": "req-1",
        "X-LibreChat-Code-Workspace-ID": "workspace-7",
    }
    for _ in range(3):  # one jti, three calls: LibreChat's 30 s token cache
        ran = client.post("/v1/exec", json={"lang": "py", "code": "print(6 * 7)"}, headers=headers)
        assert ran.status_code == 200, ran.text
        assert ran.json()["stdout"] == "42\n"
