"""The `microvm` backend against a local fake of the MicroVMs control plane (tests/fakes/
microvms.py) that the real botocore client talks to, whose VMs are real runners on
loopback: leasing, every language, files, reaping, a VM that dies while it boots, and
launches past the rate limit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.errors import BackendUnavailable
from codeexec.reaper import reap
from codeexec.runner.hooks import HOOKS
from codeexec.sandbox.microvm import vm_ids
from codeexec.sandbox.microvm.sandboxes import https
from codeexec.sandbox.remote import RunnerPort
from codeexec.settings import Settings

from ..calls import file_id, names, run, upload
from ..conftest import API_KEY
from ..fakes.microvms import FakeMicrovms
from ..helpers.microvms import trusted_fake
from ..helpers.programs import ARG, HELLO, TOKEN
from ..serving import Services, free_port

IMAGE = "arn:aws:lambda:us-east-1:123456789012:microvm-image:codeexec-runner"
EGRESS = "arn:aws:lambda:us-east-1:123456789012:network-connector:codeexec-no-egress"
RUNNER_KEY = "microvm-runner-key-0123"

NOBODY = "A" * 21  # a session id no runner holds


@pytest.fixture
def fake(aws_env: None, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMicrovms]:
    with trusted_fake(settings, monkeypatch) as running:
        yield running


def microvm_settings(fake: FakeMicrovms) -> dict[str, Any]:
    return {
        "sandbox_backend": "microvm",
        "microvm_image": IMAGE,
        "microvm_egress_connector": EGRESS,
        "microvm_endpoint_url": fake.base_url,
        "runner_key": SecretStr(RUNNER_KEY),
        "lease_ttl_seconds": 7200,
        "idle_timeout_seconds": 600,
        "microvm_boot_seconds": 20,
    }


@pytest.fixture
def app(settings: Settings, fake: FakeMicrovms, services: Services) -> FastAPI:
    return create_app(services(settings.model_copy(update=microvm_settings(fake))))


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app, headers={"X-API-Key": API_KEY})


def test_a_session_is_a_microvm_launched_with_the_lease_and_no_egress(client: TestClient, fake: FakeMicrovms) -> None:
    body = run(client, "open('out.txt', 'w').write('vm'); print(6 * 7)")
    assert (body["stdout"], body["stderr"]) == ("42\n", "")
    session = body["session_id"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{21}", session)
    [launch] = fake.launches
    assert vm_ids.vm_of(session) in fake.vms
    assert launch["imageIdentifier"] == IMAGE
    assert launch["maximumDurationInSeconds"] == 7200  # the lease TTL
    assert launch["idlePolicy"]["maxIdleDurationSeconds"] == 600  # the idle limit
    assert launch["idlePolicy"]["autoResumeEnabled"] is True
    assert launch["egressNetworkConnectors"] == [EGRESS]
    # The VM learns its runner key from RunMicrovm's payload, at AWS's hooks: the image's
    # /ready, then /run with the payload as its body.
    assert json.loads(launch["runHookPayload"]) == {"runner_key": RUNNER_KEY}
    assert fake.hooks == [(f"{HOOKS}/ready", b""), (f"{HOOKS}/run", launch["runHookPayload"].encode())]
    # The session, made through the runner once it had its key, is named after the VM and
    # knows its owner (the runner's state, out of the sandbox's reach).
    lease = runner_call(fake, session, f"/sessions/{session}").json()
    assert lease["session_id"] == session and all(lease["owner"].values())
    # A second run lands in the same VM, and reads what the first wrote.
    again = run(client, "print(open('out.txt').read())", session_id=session)
    assert (again["session_id"], again["stdout"]) == (session, "vm\n")
    assert len(fake.launches) == 1


def runner_call(fake: FakeMicrovms, session: str, path: str, **headers: str) -> httpx.Response:
    """A call to the session's VM through its endpoint, as the backend makes it."""
    vm = fake.vms[vm_ids.vm_of(session)]
    proxy = {"X-aws-proxy-auth": next(iter(vm.tokens)), "X-aws-proxy-port": "8080"}
    headers = proxy | {"X-Runner-Key": RUNNER_KEY} | headers
    return httpx.get(f"{fake.endpoints_url}/endpoints/{vm.id}{path}", headers=headers)


def test_the_endpoint_wants_a_minted_token_and_the_runner_its_key(client: TestClient, fake: FakeMicrovms) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    lease = f"/sessions/{session}"
    assert runner_call(fake, session, lease, **{"X-aws-proxy-auth": "forged"}).status_code == 403
    assert runner_call(fake, session, lease, **{"X-Runner-Key": "wrong"}).status_code == 401
    assert runner_call(fake, session, lease).status_code == 200


@pytest.mark.parametrize("lang", sorted(HELLO))
def test_every_language_runs_in_a_microvm(client: TestClient, lang: str) -> None:
    body = run(client, HELLO[lang], lang, args=[ARG])
    assert (body["stdout"], body["stderr"]) == (f"{TOKEN}\n{ARG}\n", "")
    assert names(body) == ["out.txt"]


def test_files_upload_list_download_delete(client: TestClient) -> None:
    blob = bytes(range(256)) * 512
    up = upload(client, "data/blob.bin", blob)
    session = up["session_id"]
    blob_id = file_id(session, "data/blob.bin")
    listing = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert [(f["path"], f["size"]) for f in listing] == [("data/blob.bin", len(blob))]
    assert client.get(f"/v1/download/{session}/{blob_id}").content == blob
    ran = run(client, "print(len(open('data/blob.bin','rb').read()))", session_id=session)
    assert ran["stdout"] == f"{len(blob)}\n"
    assert client.delete(f"/v1/files/{session}/{blob_id}").status_code == 200
    assert client.get(f"/v1/files/{session}").json() == []


def test_another_organization_cannot_address_the_session(client: TestClient) -> None:
    session = upload(client, "a.txt", b"secret")["session_id"]
    other = client.get(f"/v1/files/{session}", headers={"User-Id": "u2"})
    assert other.status_code == 200  # the key holder naming no user is the organization's own server
    assert client.get(f"/v1/files/{'B' * 21}").status_code == 404  # no such VM
    assert client.get("/v1/files/abc_def______________").status_code == 404  # no VM id maps to it


def test_a_closed_service_lets_go_of_its_connections_to_the_vms(app: FastAPI, fake: FakeMicrovms) -> None:
    """A closed service holds no connection open: the fake's endpoints wait for open ones
    as they stop (each microvm test's teardown waited for one)."""
    run(TestClient(app, headers={"X-API-Key": API_KEY}), "print(1)")
    endpoints = httpx.URL(fake.endpoints_url).port
    assert connections_to(endpoints) > 0  # kept for the next call
    app.state.service.close()
    assert connections_to(endpoints) == 0


def connections_to(port: int | None) -> int:
    """This host's established TCP connections to a port on loopback."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                remote, state = row.split()[2:4]
                count += state == "01" and int(remote.rsplit(":", 1)[1], 16) == port
    return count


def test_the_reaper_ends_what_aws_suspended_and_what_outlived_its_ttl(
    client: TestClient, app: FastAPI, fake: FakeMicrovms
) -> None:
    sandboxes = app.state.service.sandboxes
    idle = upload(client, "a.txt", b"x")["session_id"]
    busy = upload(client, "b.txt", b"y")["session_id"]
    assert reap(sandboxes, 600).ended == 0  # both awake: AWS keeps their idle clocks

    fake.vms[vm_ids.vm_of(busy)].last_traffic += 650  # called meanwhile
    fake.advance(620)  # the idle one is suspended
    assert fake.vms[vm_ids.vm_of(idle)].state == "SUSPENDED"
    report = reap(sandboxes, 600, clock=lambda: fake.now())
    assert (report.seen, report.ended) == (2, 1)
    assert client.get(f"/v1/files/{idle}").status_code == 404
    assert client.get(f"/v1/files/{busy}").status_code == 200

    report = reap(sandboxes, 600, clock=lambda: fake.now() + 7200)  # past the TTL
    assert report.ended == 1
    assert fake.running() == []
    assert list(sandboxes.leases()) == []


def test_a_vm_that_dies_while_it_boots_is_a_503_to_retry(client: TestClient, fake: FakeMicrovms) -> None:
    fake.die_on_boot = True
    answer = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert answer.status_code == 503
    assert "stopped while it booted" in answer.json()["details"]
    assert answer.json()["retry_after_seconds"] >= 1
    assert fake.running() == []
    assert run(client, "print(2)")["stdout"] == "2\n"  # the next launch works


def test_a_vm_id_that_maps_to_no_session_id_is_refused_and_ended(client: TestClient, fake: FakeMicrovms) -> None:
    fake.next_ids = ["microvm-" + "a" * 40]
    answer = client.post("/v1/upload", files={"file": ("a.txt", b"x")})
    assert answer.status_code == 503
    assert "cannot be a 21-character session id" in answer.json()["details"]
    assert fake.running() == []


def test_launches_past_the_rate_limit_answer_429_with_aws_retry_hint(client: TestClient, fake: FakeMicrovms) -> None:
    fake.throttled = 1  # one refusal: botocore's own retries absorb it
    assert run(client, "print(1)")["stdout"] == "1\n"

    fake.throttled, fake.retry_after = 10, 4  # more than botocore retries
    answer = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert answer.status_code == 429
    assert answer.json()["error"] == "rate_limited"
    assert answer.json()["retry_after_seconds"] == 4
    assert answer.headers["retry-after"] == "4"
    assert len(fake.running()) == 1


def test_concurrent_launches_each_get_a_vm(client: TestClient, fake: FakeMicrovms) -> None:
    with ThreadPoolExecutor(4) as pool:
        sessions = list(pool.map(lambda i: run(client, f"print({i})")["session_id"], range(4)))
    assert len(set(sessions)) == 4 == len(fake.running())


def test_vm_ids_map_to_session_ids_and_back() -> None:
    for vm_id in ("mvm-0123456789abcdef", "a", "A" * 21, "x-y-z"):
        session = vm_ids.session_of(vm_id)
        assert re.fullmatch(r"[A-Za-z0-9_-]{21}", session)
        assert vm_ids.vm_of(session) == vm_id
    for bad in ("", "has_underscore", "a" * 22, "ends_in_underscore__x" + "_", "slash/id"):
        with pytest.raises(vm_ids.Unmappable):
            vm_ids.session_of(bad)


def test_the_endpoint_is_used_as_https_whether_aws_answers_its_scheme_or_not() -> None:
    assert https("mvm-0a1b.lambda-microvm.us-east-1.on.aws") == "https://mvm-0a1b.lambda-microvm.us-east-1.on.aws"
    assert https("https://mvm-0a1b.example/x") == "https://mvm-0a1b.example/x"


def test_a_session_runs_with_the_hook_envelope_of_aws_samples_and_an_endpoint_with_its_scheme(
    aws_env: None, settings: Settings, monkeypatch: pytest.MonkeyPatch, services: Services
) -> None:
    with trusted_fake(settings, monkeypatch, hook_body="envelope", endpoint_scheme=True) as fake:
        app = create_app(services(settings.model_copy(update=microvm_settings(fake))))
        body = run(TestClient(app, headers={"X-API-Key": API_KEY}), "print(6 * 7)")
        assert body["stdout"] == "42\n"
        [vm] = fake.vms.values()
        assert fake.record(vm)["endpoint"].startswith("https://")
        [_, (_, envelope)] = fake.hooks
        assert json.loads(envelope) == {"microvmId": vm.id, "runHookPayload": fake.launches[0]["runHookPayload"]}


@pytest.fixture
def hooked_runner(sandbox_root: Path) -> Iterator[tuple[str, str]]:
    """`python -m codeexec.runner` as the image starts it in a VM: no key, its hooks on a port."""
    port, hooks = free_port(), free_port()
    env = {**os.environ, "RUNNER_PORT": str(port), "RUNNER_HOOK_PORT": str(hooks), "SANDBOX_ROOT": str(sandbox_root)}
    env.pop("RUNNER_KEY", None)
    process = subprocess.Popen([sys.executable, "-m", "codeexec.runner"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and "Sandbox runner on" in process.stdout.readline()
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{hooks}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_runner_answers_awss_hooks_at_their_paths_with_their_bodies(hooked_runner: tuple[str, str]) -> None:
    runner, hooks = hooked_runner
    keyed = {"X-Runner-Key": RUNNER_KEY}
    deadline = time.monotonic() + 20
    while (ready := httpx.post(f"{hooks}{HOOKS}/ready")).status_code == 503:  # the build asks until it is up
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert ready.status_code == 200
    assert httpx.get(f"{runner}/sessions/{NOBODY}", headers=keyed).status_code == 401  # no key until the run hook

    assert httpx.post(f"{hooks}/run", content=b"{}").status_code == 404  # only AWS's paths
    assert httpx.post(f"{hooks}{HOOKS}/run", content=b"not json").status_code == 400
    assert httpx.post(f"{hooks}{HOOKS}/run", json={"owner": "x"}).status_code == 400
    # The payload as the body, as AWS's API reference has it: the runner takes the key.
    payload = json.dumps({"runner_key": RUNNER_KEY})
    assert httpx.post(f"{hooks}{HOOKS}/run", content=payload).status_code == 200
    assert httpx.get(f"{runner}/sessions/{NOBODY}", headers=keyed).status_code == 404  # the key passes
    # AWS's samples' envelope of the same payload, again (a retried hook): the same key, fine.
    envelope = {"microvmId": "mvm-0123456789abcdef", "runHookPayload": payload}
    assert httpx.post(f"{hooks}{HOOKS}/run", json=envelope).status_code == 200
    # Another key never replaces the first: the VM is its first caller's.
    other = {"microvmId": "mvm-0123456789abcdef", "runHookPayload": json.dumps({"runner_key": "another-key"})}
    assert httpx.post(f"{hooks}{HOOKS}/run", json=other).status_code == 409
    assert httpx.get(f"{runner}/sessions/{NOBODY}", headers={"X-Runner-Key": "another-key"}).status_code == 401
    assert httpx.get(f"{runner}/sessions/{NOBODY}", headers=keyed).status_code == 404  # the key passes


def test_a_vm_whose_session_cannot_be_made_is_ended(
    client: TestClient, fake: FakeMicrovms, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise BackendUnavailable("the runner refused the session", retry_after=1)

    monkeypatch.setattr(RunnerPort, "execute", refused)
    answer = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert answer.status_code == 503
    assert len(fake.launches) == 1 and fake.running() == []  # ended, not left to idle to its TTL


def test_a_run_its_first_candidate_refuses_lands_in_the_next_with_every_input(
    client: TestClient, fake: FakeMicrovms
) -> None:
    """G1 LibreChat names an agent's file (a shared session, where no run lands) beside the
    user's own: the shared VM refuses the run (while the user's file streams to it), the
    user's own VM takes it, and the agent's file is read from its VM once."""
    agent = client.post("/v1/upload", data={"entity_id": "agent-1"}, files={"file": ("agent.txt", b"A" * 200_000)})
    mine = upload(client, "mine.txt", b"m")
    refs = [
        {"id": agent.json()["files"][0]["fileId"], "name": "agent.txt", "session_id": agent.json()["session_id"]},
        {"id": mine["files"][0]["fileId"], "name": "mine.txt", "session_id": mine["session_id"]},
    ]
    launched = len(fake.launches)
    body = run(client, "print(len(open('agent.txt').read()), open('mine.txt').read())", files=refs)
    assert (body["session_id"], body["stdout"], body["stderr"]) == (mine["session_id"], "200000 m\n", "")
    assert len(fake.launches) == launched  # no new VM: the user's own took it
