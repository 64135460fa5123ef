"""Leases, touch and the reaper, with an injectable clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from codeexec import ids
from codeexec.api.service import Service
from codeexec.auth import Caller
from codeexec.errors import SessionNotFound
from codeexec.reaper import reap
from codeexec.sandbox.local import LocalSandboxes
from codeexec.sandbox.port import Owner
from codeexec.sessions import SessionLimits, Sessions
from codeexec.sessions.commands import Execute, Landing
from codeexec.settings import Settings

from ..serving import Services, serving

HOUR = 3600.0
PROJECT = Path(__file__).parents[2]


DEFAULT = Owner("default")


@pytest.fixture
def sandboxes(settings: Settings, local_sandboxes: Callable[[Settings], LocalSandboxes]) -> LocalSandboxes:
    return local_sandboxes(settings.model_copy(update={"lease_ttl_seconds": 10 * HOUR}))


def sessions_over(sandboxes: LocalSandboxes) -> Sessions:
    limits = SessionLimits(run_timeout_seconds=20, max_files_per_run=100, max_upload_bytes=1 << 20)
    return Sessions(sandboxes, limits)


def new_session(sandboxes: LocalSandboxes, owner: Owner = DEFAULT) -> str:
    with sandboxes.create(owner.tag()) as sandbox:
        return sandbox.id


def anyone(lease: object) -> bool:
    return True


def alive(sandboxes: LocalSandboxes, session_id: str) -> bool:
    try:
        with sandboxes.open(session_id, anyone):
            return True
    except SessionNotFound:
        return False


def test_lease_records_owner_time_and_ttl(sandboxes: LocalSandboxes) -> None:
    before = time.time()
    session = new_session(sandboxes, Owner("acme", "alice"))
    [lease] = list(sandboxes.leases())
    assert (lease.session_id, lease.owner, lease.ttl_seconds) == (session, Owner("acme", "alice").tag(), 10 * HOUR)
    assert before <= lease.leased_at <= lease.touched_at <= time.time()


def test_lease_past_its_ttl_is_ended(sandboxes: LocalSandboxes) -> None:
    session = new_session(sandboxes)
    # Touched a moment ago, so only the TTL clock can end it.
    report = reap(sandboxes, idle_timeout=100 * HOUR, clock=lambda: time.time() + 10 * HOUR + 1)
    assert (report.seen, report.ended, report.skipped, report.failed) == (1, 1, 0, 0)
    assert not alive(sandboxes, session)


def test_idle_lease_is_ended_and_a_touched_one_survives(sandboxes: LocalSandboxes) -> None:
    idle, touched = new_session(sandboxes), new_session(sandboxes)
    later = time.time() + HOUR
    # Backdate both, then touch one by addressing it, as every call does.
    for session in (idle, touched):
        lock = sandboxes.root / session / "lock"
        past = time.time() - 2 * HOUR
        os.utime(lock, (past, past))
    assert alive(sandboxes, touched)
    report = reap(sandboxes, idle_timeout=HOUR + 60, clock=lambda: later)
    assert report.ended == 1
    assert not alive(sandboxes, idle)
    assert alive(sandboxes, touched)


def test_a_session_in_a_long_run_is_not_ended(sandboxes: LocalSandboxes) -> None:
    session = new_session(sandboxes)
    started, release = threading.Event(), threading.Event()

    def long_call() -> None:
        with sandboxes.open(session, anyone):
            started.set()
            release.wait(10)

    worker = threading.Thread(target=long_call)
    worker.start()
    started.wait(10)
    far = lambda: time.time() + 100 * HOUR  # noqa: E731 - every clock says it is due
    report = reap(sandboxes, idle_timeout=HOUR, clock=far)
    assert (report.ended, report.skipped) == (0, 1)
    release.set()
    worker.join()
    assert reap(sandboxes, idle_timeout=HOUR, clock=far).ended == 1


def test_a_real_run_holds_its_session(sandboxes: LocalSandboxes, settings: Settings) -> None:
    session = new_session(sandboxes)
    request = Execute("bash", "sleep 1.5; echo done > done.txt", landing=Landing(session_id=session))
    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(sessions_over(sandboxes).execute, Caller("default", None), request)
        time.sleep(0.5)
        report = reap(sandboxes, idle_timeout=0, clock=lambda: time.time() + 100 * HOUR)
        assert reply.result().outputs[0].path == "done.txt"
    assert report.skipped == 1
    assert report.ended == 0


def test_an_ended_session_is_a_404_and_a_run_naming_it_gets_a_new_one(client: TestClient, app) -> None:
    up = client.post("/v1/upload", files={"file": ("a.txt", b"a")}).json()
    session = up["session_id"]
    app.state.service.sessions.end(session)
    assert client.get(f"/v1/files/{session}").status_code == 404
    assert client.get(f"/v1/download/{session}/a.txt").status_code == 404
    assert client.delete(f"/v1/files/{session}/a.txt").status_code == 404
    upload = client.post("/v1/upload", files={"file": ("b.txt", b"b")}, params={"session_id": session})
    assert upload.status_code == 404
    body = client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "session_id": session}).json()
    assert body["session_id"] != session
    assert body["stdout"] == "1\n"


def test_ending_twice_and_ending_nonsense_are_harmless(sandboxes: LocalSandboxes) -> None:
    session = new_session(sandboxes)
    sandboxes.end(session)
    sandboxes.end(session)
    sandboxes.end("../../etc")
    assert list(sandboxes.leases()) == []


def test_an_ending_that_failed_halfway_is_finished_next_pass(sandboxes: LocalSandboxes) -> None:
    session = new_session(sandboxes)
    # What a crash between the rename and the removal leaves behind.
    tomb = sandboxes.root / f".ended-{session}"
    (sandboxes.root / session).rename(tomb)
    assert reap(sandboxes, idle_timeout=HOUR).seen == 0
    assert not tomb.exists()


@pytest.mark.parametrize("cut", ["no lease", "a torn lease", "a lease and no lock"])
def test_a_session_cut_while_it_was_made_is_reclaimed_after_a_minute(sandboxes: LocalSandboxes, cut: str) -> None:
    """Nothing could open it, and no listing named it: it was kept for good. One being
    made now is never taken."""
    cut_short = []
    for age in (120, 0):
        path = sandboxes.storage.create_session(ids.new_session_id())
        (path / "data").mkdir()
        (path / "data" / "a.txt").write_bytes(b"a")
        whole = {"owner": {"org": "default", "user": ""}, "shared": False, "read_only": False, "leased_at": 0,
                 "ttl_seconds": 60}  # fmt: skip
        if cut != "no lease":
            (path / "lease.json").write_text(json.dumps(whole)[: 30 if cut == "a torn lease" else None])
        os.utime(path, (time.time() - age, time.time() - age))
        cut_short.append(path)
    kept = new_session(sandboxes)
    assert reap(sandboxes, idle_timeout=HOUR).seen == 1
    assert [path.exists() for path in cut_short] == [False, True]  # the minute-old one went
    assert [lease.session_id for lease in sandboxes.leases()] == [kept]


def test_reaper_and_20_concurrent_runs_interleave(sandboxes: LocalSandboxes) -> None:
    doomed = [new_session(sandboxes) for _ in range(10)]
    for session in doomed:
        past = time.time() - 2 * HOUR
        os.utime(sandboxes.root / session / "lock", (past, past))

    def one_run(i: int) -> tuple[str, str, list[str]]:
        request = Execute("py", f"open('f{i}.txt','w').write('{i}')\nprint({i})")
        reply = sessions_over(sandboxes).execute(Caller("default", None), request)
        return reply.session_id, reply.stdout, [f.path for f in reply.outputs]

    with ThreadPoolExecutor(8) as pool:
        runs = [pool.submit(one_run, i) for i in range(20)]
        reports = [reap(sandboxes, idle_timeout=HOUR) for _ in range(3)]
        results = [r.result() for r in runs]
    assert sum(r.ended for r in reports) == 10
    assert sum(r.failed for r in reports) == 0
    for i, (session, stdout, files) in enumerate(results):
        assert stdout == f"{i}\n" and files == [f"f{i}.txt"]
        with sandboxes.open(session, anyone) as sandbox:
            reader, _ = sandbox.open_file(f"f{i}.txt")
            assert reader.read() == str(i).encode()
    assert not any(alive(sandboxes, s) for s in doomed)


def test_the_embedded_service_reaps_on_a_timer_from_its_start_to_its_close(settings: Settings) -> None:
    quick = settings.model_copy(update={"reap_interval_seconds": 0.05, "idle_timeout_seconds": 0})
    service = Service(quick)
    assert isinstance(service.sandboxes, LocalSandboxes)
    first = new_session(service.sandboxes)
    time.sleep(0.3)
    assert alive(service.sandboxes, first)  # made, not started: no timer yet
    with service:
        deadline = time.monotonic() + 10
        while alive(service.sandboxes, first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(service.sandboxes, first)
    second = new_session(service.sandboxes)
    time.sleep(0.3)
    assert alive(service.sandboxes, second)  # closed: the timer has stopped


REAPER_INVOCATION = """
import json, sys
from tests.lambda_events import Context
import handlers.reaper


print(json.dumps(handlers.reaper.handler(json.load(open("events/reaper.json")), Context())))
"""


def test_the_reaper_function_ends_an_api_session_from_outside(settings: Settings, services: Services) -> None:
    """The service on loopback leases a session; the reaper function, in a process of its
    own sharing only SANDBOX_ROOT, ends it once its TTL is over; the API then answers 404."""
    import httpx

    from codeexec.api.app import create_app

    from ..conftest import API_KEY

    with serving(create_app(services(settings.model_copy(update={"lease_ttl_seconds": 1})))) as url:
        base, headers = f"{url}/v1", {"X-API-Key": API_KEY}
        session = httpx.post(f"{base}/upload", files={"file": ("a.txt", b"a")}, headers=headers).json()["session_id"]
        time.sleep(1.2)  # past the 1 s TTL
        env = {
            "PATH": os.environ["PATH"],
            "SANDBOX_ROOT": str(settings.sandbox_root),
            "LEASE_TTL_SECONDS": "1",
            "IDLE_TIMEOUT_SECONDS": "3600",
            "POWERTOOLS_METRICS_NAMESPACE": "codeexec",  # what template.yaml sets
        }
        done = subprocess.run(
            [sys.executable, "-c", REAPER_INVOCATION], env=env, cwd=PROJECT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert (report["seen"], report["ended"]) == (1, 1)
        assert httpx.get(f"{base}/files/{session}", headers=headers).status_code == 404


def test_a_lease_is_read_without_touching_it(sandboxes: LocalSandboxes) -> None:
    session = new_session(sandboxes)
    lock = sandboxes.root / session / "lock"
    os.utime(lock, (time.time() - HOUR, time.time() - HOUR))  # idle for an hour
    lease = sandboxes.lease(session)
    assert (lease.session_id, lease.owner) == (session, DEFAULT.tag())
    assert lease.touched_at == lock.stat().st_mtime < time.time() - HOUR + 60  # still idle: the look touched nothing
    sandboxes.end(session)
    for gone in (session, "not-a-session-id", "../" + session):
        with pytest.raises(SessionNotFound):
            sandboxes.lease(gone)
