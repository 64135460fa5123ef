"""Issue 41, item 3: storage quotas over all of a user's (an organization's) sessions. An upload
or a run past one is refused with a 413 that says the figure and what to do; nothing stored
is lost or cut; a run that writes past it finds its disk full. A quota holds to within the
room a session keeps for its bookkeeping (1 MiB)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.runner.app import Runner
from codeexec.sandbox.local import LocalSandboxes, usage
from codeexec.sandbox.remote import fleet
from codeexec.service_keys import key_hash
from codeexec.settings import Settings

from ..calls import run, session_on_runner
from ..conftest import API_KEY
from ..serving import Services, fleet_settings, running_fleet

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


def test_a_fleet_counts_what_a_user_holds_on_every_runner_asking_each_once_an_interval(
    settings: Settings, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runners; the user's sessions on two of them fill its quota, so an upload on the
    third is refused. The service learns what each runner holds by one request to each every
    interval (USAGE_SECONDS), and a run or an upload adds none."""
    monkeypatch.setattr(fleet, "USAGE_SECONDS", 0.5)
    quota = settings.model_copy(update={"max_user_bytes": 5 * MiB})
    with running_fleet(quota) as runners:
        service = services(fleet_settings(quota, [url for url, _ in runners]))
        client = TestClient(create_app(service), headers={"X-API-Key": API_KEY, "User-Id": "alice"})
        placed = {index: session_on_runner(client, index, b"-") for index in range(3)}
        for index in (0, 1):
            assert upload(client, "alice", "big.bin", 2 * MiB, session=placed[index])["status"] == 200
        for _, runner in runners:
            runner.sandboxes.usage.refresh()
        started = time.monotonic()
        time.sleep(1.6)  # three intervals: the service has asked each runner since
        refused = upload(client, "alice", "more.bin", 2 * MiB, session=placed[2])
        assert refused["status"] == 413
        assert "this user's sessions hold 4." in refused["details"] and "of the 5.0 MiB" in refused["details"]
        assert upload(client, "bob", "more.bin", 2 * MiB)["status"] == 200  # another user's own
        asked = [usage_requests(runner) for _, runner in runners]
        intervals = (time.monotonic() - started) / fleet.USAGE_SECONDS
        assert all(1 <= count <= intervals + 2 for count in asked), asked


def usage_requests(runner: Runner) -> float:
    metrics = runner.telemetry.metrics
    assert metrics is not None
    return sum(
        sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "codeexec_requests_total" and sample.labels["route"] == "/usage"
    )


def test_the_usage_index_forgets_owners_who_left_and_tells_a_late_asker_everything(
    settings: Settings, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host sees users come and go for months: what it remembers of who changed is bounded
    by who holds something now. A fleet's service asking within the window hears that a gone
    user holds 0; one asking from before it is told the whole (and so drops the gone user)."""
    monkeypatch.setattr(usage, "REMEMBERED_PASSES", 2)
    service, client = quota_service(services, settings)
    assert isinstance(service.sandboxes, LocalSandboxes)
    index = service.sandboxes.usage
    ended = []
    for user in range(6):
        ended.append(upload(client, f"passing-{user}", "a.bin", 64 << 10)["session_id"])
        index.refresh()
    kept = upload(client, "staying", "a.bin", 64 << 10)["session_id"]
    index.refresh()
    asked_at = index.generation
    for session in ended:
        service.sandboxes.end(session)
    index.refresh()
    soon = index.changes(index.epoch, asked_at)
    gone = [digest for digest, size in soon["bytes"].items() if size == 0]
    assert not soon["whole"] and len(gone) == 6  # (and their organization's, which "staying" shares)
    for _ in range(3):  # the window passes while "staying" keeps writing
        upload(client, "staying", "b.bin", 4096, session=kept)
        index.refresh()
    late = index.changes(index.epoch, asked_at)
    assert late["whole"] and set(late["bytes"]) == set(index.now.bytes_by_digest())
    assert not set(gone) & set(late["bytes"])
    assert len(index._changed) <= len(index.now.bytes_by_digest()) + 1  # who holds now, and at most the last pass's
