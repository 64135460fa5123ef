"""Issue 41, item 3: storage quotas over all of a user's (an organization's) sessions. An upload
or a run past one is refused with a 413 that says the figure and what to do; nothing stored
is lost or cut; a run that writes past it finds its disk full. A quota holds to within the
room a session keeps for its bookkeeping (1 MiB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.sandbox.local import LocalSandboxes
from codeexec.service_keys import key_hash
from codeexec.settings import Settings

from .calls import run
from .conftest import API_KEY
from .serving import Services

MiB = 1 << 20


def quota_service(services: Services, settings: Settings, **quotas: int) -> tuple[Service, TestClient]:
    service = services(settings.model_copy(update=quotas))
    return service, TestClient(create_app(service), headers={"X-API-Key": API_KEY})


def counted(service: Service) -> None:
    """The usage pass a quota reads, now rather than within its few seconds."""
    assert isinstance(service.sandboxes, LocalSandboxes)
    service.sandboxes.usage.refresh()


def upload(client: TestClient, user: str, name: str, size: int, session: str | None = None) -> dict:
    params = {"session_id": session} if session else {}
    answer = client.post(
        "/v1/upload", files={"file": (name, b"x" * size)}, headers={"User-Id": user}, params=params
    )
    return {"status": answer.status_code, **answer.json()}


@pytest.mark.parametrize("scope", ["user", "tenant"])
def test_an_upload_past_a_quota_is_a_413_saying_the_figure_and_nothing_is_lost(
    settings: Settings, services: Services, scope: str
) -> None:
    limit = {"max_user_bytes" if scope == "user" else "max_tenant_bytes": 3 * MiB}
    service, client = quota_service(services, settings, **limit)
    first = upload(client, "alice", "a.bin", 2 * MiB)
    assert first["status"] == 200
    counted(service)
    refused = upload(client, "alice" if scope == "user" else "bob", "b.bin", 3 * MiB)
    assert refused["status"] == 413
    whose = "this user's" if scope == "user" else "this organization's"
    assert refused["details"].startswith(f"{whose} sessions hold 2.0 MiB of the 3.0 MiB they may hold")
    assert "delete files" in refused["details"]
    # Nothing stored is lost, nothing of the refused upload is left.
    session = first["session_id"]
    assert client.get(f"/v1/files/{session}?detail=summary", headers={"User-Id": "alice"}).json()[0]["size"] == 2 * MiB
    assert client.get(f"/v1/download/{session}/a.bin").content == b"x" * 2 * MiB
    # Within what is left, it goes in.
    assert upload(client, "alice", "c.bin", MiB // 2, session=session)["status"] == 200


def test_a_run_that_writes_past_the_quota_finds_its_disk_full_and_another_user_does_not(
    settings: Settings, services: Services
) -> None:
    service, client = quota_service(services, settings, max_user_bytes=4 * MiB)
    stored = upload(client, "alice", "a.bin", 3 * MiB)
    assert stored["status"] == 200
    counted(service)
    code = "open('big.bin', 'wb').write(b'x' * (3 << 20))\nprint('wrote')"
    full = run(client, code, user_id="alice")
    assert "Disk quota exceeded" in full["stderr"] and "wrote" not in full["stdout"]
    assert run(client, code, user_id="bob")["stdout"] == "wrote\n"
    # What the run wrote before its disk was full counts: at the quota now, a run is
    # refused before it starts, with the figure; the first upload is whole.
    counted(service)
    over = client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "user_id": "alice"})
    assert over.status_code == 413 and "this user's sessions hold" in over.json()["details"]
    assert client.get(f"/v1/download/{stored['session_id']}/a.bin").content == b"x" * 3 * MiB


def test_a_named_keys_stored_bytes_is_its_organizations_quota(
    settings: Settings, services: Services, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    line = {"name": "small", "sha256": key_hash("small-key"), "org": "small", "stored_bytes": MiB}
    keys.write_text(json.dumps(line) + "\n")
    service, client = quota_service(services, settings, code_exec_api_keys_file=keys)
    small = {"X-API-Key": "small-key", "User-Id": "u"}
    assert client.post("/v1/upload", files={"file": ("a", b"x" * (MiB - 4096))}, headers=small).status_code == 200
    counted(service)
    over = client.post("/v1/upload", files={"file": ("b", b"x" * 8192)}, headers=small)
    assert over.status_code == 413 and "this organization's" in over.json()["details"]
    # The default key's organization is another one, with no quota.
    assert upload(client, "u", "c.bin", 2 * MiB)["status"] == 200
