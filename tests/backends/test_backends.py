"""The contract every backend keeps, run against each: `memory` (no sandbox), `local`
(bubblewrap on this host), a `runner` on loopback, a `fleet` of three runners, `agentcore`
and `microvm` through their fakes. The clauses of docs/backends.md ("What a new backend
must keep") are its tests, each named for its clause, through the API where a client sees
the clause and at the port where only the backend does; then the API's behaviour that is
the same on every backend.

A backend that cannot do something says so (port.Sandboxes: `languages`,
`named_sessions`, `mnt_data`, `cancels`), and its test skips saying which, or checks that
it answers as it said. Requests per route are counted in tests/backends/test_round_trips.py."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.errors import Conflict, SessionNotFound
from codeexec.reaper import reap
from codeexec.runner.app import Runner
from codeexec.sandbox.port import Access, Input, Intent, Lease, Owner, Placed, Placement, Program, Run, Sandboxes
from codeexec.settings import Settings

from ..calls import file_id, names, run, upload
from ..conftest import API_KEY, base_settings
from ..fakes.microvms import FakeMicrovms
from ..helpers.microvms import trusted_fake
from ..serving import RUNNER_KEY, Services, fleet_settings, free_port, runner_settings, running_fleet, running_runner

BACKENDS = ["memory", "local", "runner", "fleet", "agentcore", "microvm"]
BINARY = bytes(range(256)) * 40 + b"\r\n\x00\xff"
ALICE, BOB = "64f0c0ffee00000000000a11", "64f0c0ffee00000000000b0b"
ORG = "default"  # a key holder's organization (CODE_EXEC_ORG)
NOBODY = "A" * 21  # a session id no backend holds
ID = re.compile(r"[A-Za-z0-9_-]{21}")
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


class Backend:
    """A backend as the tests serve it: services of given settings (`serve`), and, for the
    latest one, the backends whose reaper ends its sessions (`reapers`: the service's own, or
    each runner's, which reaps its own) and a clock some seconds later for them (`later`:
    for MicroVMs the fake's, whose VMs AWS suspends when they are idle)."""

    def __init__(self, name: str, request: pytest.FixtureRequest, stack: contextlib.ExitStack) -> None:
        self.name = name
        self._request = request
        self._stack = stack  # what a service leases from; each service closes first
        self._microvms: FakeMicrovms | None = None
        self.reapers: list[Sandboxes] = []

    def serve(self, **changes: Any) -> Service:
        services: Services = self._request.getfixturevalue("services")
        made, runners = self._made(_settings(**changes))
        service = services(made)
        self._stack.callback(service.close)  # before its runners or its fake stop (a second close does nothing)
        self.reapers = [runner.sandboxes for runner in runners] or [service.sandboxes]
        return service

    def client(self, **changes: Any) -> TestClient:
        return TestClient(create_app(self.serve(**changes)), headers={"X-API-Key": API_KEY})

    def later(self, seconds: float) -> Callable[[], float]:
        if self._microvms is not None:
            self._microvms.advance(seconds)
            return self._microvms.now
        return lambda: time.time() + seconds

    def _made(self, settings: Settings) -> tuple[Settings, list[Runner]]:
        """The service's settings, and the runners started for it."""
        name, stack = self.name, self._stack
        if name == "memory":
            return settings.model_copy(update={"sandbox_backend": "memory"}), []
        if name == "agentcore":
            url = self._request.getfixturevalue("agentcore_fake").url
            return settings.model_copy(update={"sandbox_backend": name, "agentcore_endpoint_url": url}), []
        local = settings.model_copy(update={"sandbox_root": self._request.getfixturevalue("sandbox_root")})
        if name == "runner":
            url, runner = stack.enter_context(running_runner(local))
            return runner_settings(local, url), [runner]
        if name == "fleet":
            fleet = stack.enter_context(running_fleet(local))
            return fleet_settings(local, [url for url, _ in fleet]), [runner for _, runner in fleet]
        if name == "microvm":
            if self._microvms is None:  # one a test: its VMs are runners of its first service's settings
                self._request.getfixturevalue("aws_env")
                monkeypatch = self._request.getfixturevalue("monkeypatch")
                self._microvms = stack.enter_context(trusted_fake(local, monkeypatch))
            return local.model_copy(update={
                "sandbox_backend": "microvm", "microvm_image": "arn:aws:lambda:us-east-1:1:microvm-image:runner",
                "microvm_endpoint_url": self._microvms.base_url, "runner_key": SecretStr(RUNNER_KEY),
            }), []  # fmt: skip
        return local, []


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend, as services of given settings. Only those whose sandboxes are this
    host's need root (tests/conftest.py marks them by their parameter)."""
    with contextlib.ExitStack() as stack:
        yield Backend(request.param, request, stack)


def _settings(**changes: Any) -> Settings:
    # A TTL every backend keeps as asked (AgentCore's and AWS's ceiling is 8 hours), and an
    # idle limit a MicroVM's idle policy takes (at least a minute).
    return base_settings(lease_ttl_seconds=7200, idle_timeout_seconds=600, **changes)


@pytest.fixture
def service(backend: Backend) -> Service:
    return backend.serve()


@pytest.fixture
def client(service: Service) -> TestClient:
    return TestClient(create_app(service), headers={"X-API-Key": API_KEY})


@pytest.fixture
def sandboxes(service: Service) -> Sandboxes:
    return service.sandboxes


def listed(backend: Backend) -> dict[str, Lease]:
    """Every lease the backend's reapers read, by session."""
    return {lease.session_id: lease for reaper in backend.reapers for lease in reaper.leases()}


def reaped(backend: Backend, clock: Callable[[], float]) -> tuple[int, int]:
    """One pass of each of the backend's reapers at that clock: sessions ended, and failed."""
    reports = [reap(reaper, idle_timeout=600, clock=clock) for reaper in backend.reapers]
    return sum(r.ended for r in reports), sum(r.failed for r in reports)


def as_user(user: str, intent: Intent = Intent.READ, org: str = ORG) -> Access:
    return Access(Owner(org, user).tag(), intent)


def upload_as(client: TestClient, user: str, name: str, data: bytes, **form: str) -> str:
    reply = client.post("/v1/upload", data=form, files={"file": (name, data)}, headers={"User-Id": user})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["session_id"])


def listing(client: TestClient, session: str) -> list[tuple[str, int, str]]:
    files = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    return [(f["path"], f["size"], f["lastModified"]) for f in files]


# -- 1. A session IS a sandbox ---------------------------------------------------------------


def test_a_session_is_a_sandbox_named_in_21_characters(backend: Backend, client: TestClient) -> None:
    sandboxes = client.app.state.service.sandboxes  # type: ignore[attr-defined]
    uploaded = upload(client, "a.txt", b"x")["session_id"]
    ran = run(client, "print(1)")["session_id"]
    for session in (uploaded, ran):
        assert ID.fullmatch(session), session
        assert sandboxes.lease(session).session_id == session  # the id is the sandbox's, back with no table
    assert {uploaded, ran} <= listed(backend).keys()


# -- 2. What a session owns lives with it ----------------------------------------------------


def test_what_a_session_owns_lives_with_it_and_decides_who_reaches_it(client: TestClient, sandboxes: Sandboxes) -> None:
    shared = upload_as(client, ALICE, "kb.txt", b"kb", entity_id="asst_1")  # an agent's file: the organization's
    assert [f.path for f in sandboxes.list_files(shared, as_user(BOB))] == ["kb.txt"]
    with pytest.raises(SessionNotFound):
        sandboxes.list_files(shared, as_user(BOB, org="another-org"))
    with pytest.raises(SessionNotFound):
        sandboxes.remove_file(shared, as_user(BOB, Intent.CHANGE), "kb.txt")
    for user in (ALICE, BOB):  # no run lands in a shared session, not even its owner's
        where = Placement(as_user(user, Intent.LAND), candidates=(shared,), new=False)
        with pytest.raises(SessionNotFound):
            sandboxes.execute(Run(Program("py", "print(1)"), where))
    assert client.get(f"/v1/download/{shared}/kb.txt").content == b"kb"


def test_what_a_session_owns_the_reaper_reads_from_the_listing_alone(
    backend: Backend, client: TestClient, sandboxes: Sandboxes
) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    lease = listed(backend)[session]  # the reaper's one listing
    assert (lease.ttl_seconds, sandboxes.lease(session)) == (7200, lease)


def test_what_a_session_owns_the_reaper_ends_it_when_idle_only(backend: Backend, client: TestClient) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    now = time.time()

    assert reaped(backend, clock=lambda: now + 60) == (0, 0)
    assert client.get(f"/v1/files/{session}").status_code == 200  # that call touched it again

    assert reaped(backend, clock=backend.later(620)) == (1, 0)
    assert client.get(f"/v1/files/{session}").status_code == 404
    assert listed(backend) == {}


# -- 3. One request per coarse operation, nothing held between -------------------------------


def test_one_request_per_operation_the_reaper_never_ends_a_session_a_call_has_open(
    backend: Backend, client: TestClient, sandboxes: Sandboxes
) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    uploaded = time.time()
    time.sleep(1.6)  # AgentCore's idle clock counts whole seconds
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run, client, "sleep 2; echo done", lang="bash", session_id=session)
        time.sleep(1)  # under way: idle for the idle limit as of the upload, not as of the call
        assert reaped(backend, clock=lambda: uploaded + 600.5) == (0, 0)
        assert running.result()["stdout"] == "done\n"
    # Nothing of that call is held: the next ones get the session at once, and may end it.
    assert run(client, "echo again", lang="bash", session_id=session)["session_id"] == session
    sandboxes.end(session)
    sandboxes.end(session)  # ending an ended one is a no-op
    assert client.get(f"/v1/files/{session}").status_code == 404


# -- 4. Access is decided where the session is -----------------------------------------------


def test_access_is_decided_where_the_session_is_and_anothers_session_is_not_found(
    client: TestClient, sandboxes: Sandboxes
) -> None:
    session = upload_as(client, ALICE, "a.txt", b"x")
    record = file_id(session, "no-record")
    # Alice reaches her session (it has no record: a 409, not a 404)...
    assert [f.path for f in sandboxes.list_files(session, as_user(ALICE))] == ["a.txt"]
    with pytest.raises(Conflict):
        sandboxes.read_record(session, as_user(ALICE), record)
    # ...anyone else finds it exactly as a session that does not exist.
    calls: list[Callable[[str, Access], object]] = [
        lambda target, who: sandboxes.list_files(target, who),
        lambda target, who: sandboxes.read_file(target, who, "a.txt"),
        lambda target, who: sandboxes.stat_file(target, who, "a.txt"),
        lambda target, who: sandboxes.read_record(target, who, record),
        lambda target, who: sandboxes.remove_file(target, who.to(Intent.CHANGE), "a.txt"),
    ]
    for who in (as_user(BOB), as_user(ALICE, org="another-org")):
        for target in (session, NOBODY):
            for call in calls:
                with pytest.raises(SessionNotFound):
                    call(target, who)
    assert [f.path for f in sandboxes.list_files(session, as_user(ALICE))] == ["a.txt"]


def test_access_is_decided_where_the_session_is_and_a_run_never_lands_in_anothers(
    client: TestClient, sandboxes: Sandboxes
) -> None:
    session = upload_as(client, ALICE, "a.txt", b"x")
    bob = Placement(as_user(BOB, Intent.LAND), candidates=(session,), new=False)
    with pytest.raises(SessionNotFound):
        sandboxes.execute(Run(Program("py", "print(1)"), bob))
    body = run(client, "import os; print(os.path.exists('a.txt'))", session_id=session, user_id=BOB)
    assert (body["session_id"] != session, body["stdout"]) == (True, "False\n")


# -- 5. Changes under the hold ---------------------------------------------------------------


def test_changes_under_the_hold_two_concurrent_execs_report_their_own_files(client: TestClient) -> None:
    session = run(client, "echo ready", lang="bash")["session_id"]

    def write(name: str) -> dict:
        return run(client, f"sleep 0.5; echo {name} > {name}.txt", lang="bash", session_id=session)

    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(write, ["first", "second"]))
    assert [names(reply) for reply in replies] == [["first.txt"], ["second.txt"]]
    assert {reply["session_id"] for reply in replies} == {session}


def test_changes_under_the_hold_an_input_copied_during_a_run_is_not_that_runs_output(client: TestClient) -> None:
    """A second exec into a session copies an input in while the first one runs: the copy
    waits for the first run, so the first reply lists only what its own run wrote."""
    session = run(client, "echo ready", lang="bash")["session_id"]
    elsewhere = upload(client, "input.csv", b"1,2\n")["session_id"]
    ref = {"id": "input.csv", "name": "input.csv", "session_id": elsewhere}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(run, client, "import time; time.sleep(2)", session_id=session)
        time.sleep(0.7)
        second = pool.submit(run, client, "print(open('input.csv').read())", session_id=session, files=[ref])
        assert first.result()["files"] == []
        assert second.result()["stdout"] == "1,2\n\n"


# -- 6. All or none --------------------------------------------------------------------------


def test_all_or_none_an_upload_that_fails_writes_no_file_and_leaves_no_session(backend: Backend) -> None:
    client = backend.client(max_upload_bytes=1000)
    session = upload(client, "kept.txt", b"k")["session_id"]
    before = listing(client, session)
    parts = [("file", ("small.txt", b"s")), ("file", ("big.bin", b"b" * 1001))]
    assert client.post("/v1/upload", data={"session_id": session}, files=parts).status_code == 413
    assert listing(client, session) == before
    # A session made for an upload that failed is ended at once: nobody learnt its id.
    assert client.post("/v1/upload", files=parts).status_code == 413
    assert listed(backend).keys() == {session}


# -- 7. Inputs are found, not listed ---------------------------------------------------------


def test_inputs_are_found_by_the_ref_not_listed(client: TestClient) -> None:
    origin = upload(client, "data.csv", b"1,2\n")["session_id"]
    data = file_id(origin, "data.csv")
    refs = [
        {"id": data, "name": "data-1a2b3c.csv", "session_id": origin},  # renamed by LibreChat: found by its old name
        {"id": file_id(origin, "gone.csv"), "name": "gone.csv", "session_id": origin},
    ]
    body = run(client, "print(open('data-1a2b3c.csv').read())", files=refs)
    assert body["stdout"] == "1,2\n\n"  # where its name says, and the run went on
    assert 'File "gone.csv" is not available' in body["stderr"]


def test_inputs_are_found_and_a_read_only_origins_input_is_said_so(client: TestClient, sandboxes: Sandboxes) -> None:
    skill = upload_as(client, ALICE, "run.py", b"X = 1", read_only="true")
    inputs = (Input(file_id(skill, "run.py"), "run.py", skill), Input(file_id(skill, "no.py"), "no.py", skill))
    where = Placement(as_user(ALICE, Intent.LAND))
    ran = sandboxes.execute(Run(Program("py", "print(open('run.py').read())"), where, inputs))
    assert ran.inputs == (Placed("run.py", read_only=True), Placed(None))
    assert ran.result.stdout == "X = 1\n"


# -- 8. Files are real -----------------------------------------------------------------------


def test_files_are_real_byte_for_byte_through_upload_exec_and_download(client: TestClient) -> None:
    up = upload(client, "blob.bin", BINARY)
    session = up["session_id"]
    blob = file_id(session, "blob.bin")
    assert up["files"] == [{"fileId": blob, "filename": "blob.bin"}]

    summary = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert [(f["name"], f["id"], f["path"], f["size"]) for f in summary] == [
        (f"{session}/{blob}", blob, "blob.bin", len(BINARY))
    ]
    modified = datetime.fromisoformat(summary[0]["lastModified"].replace("Z", "+00:00"))
    assert abs(modified.timestamp() - time.time()) < 3600  # the real modification time, not 1970

    code = (
        "import os\nos.makedirs('out', exist_ok=True)\n"
        "open('out/rev.zip', 'wb').write(open('blob.bin', 'rb').read()[::-1])"
    )
    files = {"id": blob, "session_id": session, "name": "blob.bin"}
    body = run(client, code, files=[files])
    assert body["session_id"] == session
    assert names(body) == ["out/rev.zip"], body  # not the source, not the unchanged input
    rev = body["files"][0]["id"]

    assert client.get(f"/v1/download/{session}/{blob}").content == BINARY
    assert client.get(f"/v1/download/{session}/{rev}").content == BINARY[::-1]
    simple = client.get(f"/v1/files/{session}").json()
    assert sorted(simple) == sorted([f"{session}/{blob}", f"{session}/{rev}"])


def test_files_are_real_the_object_route_answers_the_files_modification_time(client: TestClient) -> None:
    session = upload(client, "data.csv", b"a,b\n")["session_id"]
    listed = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()[0]
    info = client.get(f"/v1/sessions/{session}/objects/{file_id(session, 'data.csv')}").json()
    # LibreChat takes a file older than 23 hours for gone and uploads it again.
    assert info["lastModified"] == listed["lastModified"]
    modified = datetime.fromisoformat(info["lastModified"].replace("Z", "+00:00"))
    assert abs(modified.timestamp() - time.time()) < 3600
    assert (info["size"], info["contentType"]) == (4, "text/csv")


def test_files_are_real_a_run_leaves_the_times_of_what_it_did_not_change(
    client: TestClient, sandboxes: Sandboxes
) -> None:
    session = run(client, "echo a > kept.txt; echo b > changed.txt", lang="bash")["session_id"]
    server = Access(Owner(ORG).tag(), Intent.READ, server=True)
    before = {f.path: f for f in sandboxes.list_files(session, server)}
    body = run(client, "cat kept.txt; echo c >> changed.txt", lang="bash", session_id=session)
    after = {f.path: f for f in sandboxes.list_files(session, server)}
    assert (body["stdout"], names(body)) == ("a\n", ["changed.txt"])
    assert after["kept.txt"] == before["kept.txt"]
    assert after["changed.txt"].mtime_ns > before["changed.txt"].mtime_ns and after["changed.txt"].size == 4


def test_files_are_real_and_no_path_leads_out_of_the_session(client: TestClient) -> None:
    body = run(client, "ln -s /etc/passwd leak.txt; ln -s /etc leaked; echo ok > real.txt", lang="bash")
    session = body["session_id"]
    assert names(body) == ["real.txt"]
    assert [path for path, _, _ in listing(client, session)] == ["real.txt"]
    for path in ("leak.txt", "leaked/passwd", "../../../etc/passwd"):
        assert client.get(f"/v1/download/{session}/{quote(path, safe='')}").status_code in (400, 404), path
    assert client.get(f"/v1/download/{session}/real.txt").content == b"ok\n"


# -- 9. A limit is a result, not an error ----------------------------------------------------


def test_a_limit_is_a_result_the_time_limit_stops_a_run_with_a_note(backend: Backend) -> None:
    body = run(backend.client(run_timeout_seconds=1), "sleep 30", lang="bash")
    assert "exceeded its 1 s time limit" in body["stderr"]


@pytest.mark.parametrize(
    ("lang", "code"),
    [
        ("py", "import time\nwhile True:\n    open('ticks.txt', 'a').write('.'); time.sleep(0.05)"),
        ("js", "const fs = require('fs'); for (;;) { fs.appendFileSync('ticks.txt', '.'); }"),
        ("bash", "while true; do printf . >> ticks.txt; sleep 0.05; done"),
    ],
)
def test_a_limit_is_a_result_and_a_run_past_its_time_is_stopped_not_abandoned(
    backend: Backend, lang: str, code: str
) -> None:
    client = backend.client(run_timeout_seconds=1)
    body = run(client, code, lang=lang)
    assert "exceeded its 1 s time limit" in body["stderr"]
    assert "may still be running" not in body["stderr"]
    session = body["session_id"]

    def ticks() -> int:
        return len(client.get(f"/v1/download/{session}/ticks.txt").content)

    counted = ticks()
    time.sleep(1)
    assert ticks() == counted > 0  # nothing writes any more


def test_a_limit_is_a_result_and_a_cut_stdout_says_ol(backend: Backend) -> None:
    """LibreChat's own file tools read images over /exec in windows and read `status: "OL"`
    as "the window overflowed": without it, a cut window is base64 that does not parse."""
    client = backend.client(max_output_bytes=1000)
    cut = run(client, "print('x' * 5000)")
    assert (cut["status"], len(cut["stdout"])) == ("OL", 1000)
    assert "stdout exceeded 1000 bytes" in cut["stderr"]
    whole = run(client, "import sys; print('y' * 900); sys.stderr.write('z' * 5000)")
    assert "status" not in whole and whole["stdout"] == "y" * 900 + "\n"  # a cut stderr is no overflow of stdout


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        ({"sandbox_backend": "runner", "runner_key": SecretStr(RUNNER_KEY)}, "runner_url"),
        ({"sandbox_backend": "agentcore"}, "agentcore_endpoint_url"),
        (
            {
                "sandbox_backend": "microvm",
                "microvm_image": "arn:aws:lambda:us-east-1:1:microvm-image:r",
                "runner_key": SecretStr(RUNNER_KEY),
            },
            "microvm_endpoint_url",
        ),
    ],  # fmt: skip
    ids=["runner", "agentcore", "microvm"],
)
def test_a_limit_is_a_result_and_a_backend_out_of_reach_a_503(
    remote: dict[str, Any], url: str, services: Services, aws_env: None
) -> None:
    """Remote backends only (the others are this process): one that cannot be reached
    answers 503 with a retry hint, never a 500."""
    settings = _settings(**remote, **{url: f"http://127.0.0.1:{free_port()}"})
    client = TestClient(create_app(services(settings)), headers={"X-API-Key": API_KEY})
    for reply in (client.post("/v1/upload", files={"file": ("a.txt", b"x")}), client.get(f"/v1/files/{NOBODY}")):
        assert reply.status_code == 503, reply.text
        assert int(reply.headers["Retry-After"]) > 0


# -- 10. The service's record of a workflow --------------------------------------------------


def test_the_record_of_a_workflow_is_replaced_only_by_the_round_its_digest_names(client: TestClient) -> None:
    program = {"code": "print(await get_weather(city='x'))", "tools": [WEATHER]}
    asked = client.post("/v1/exec/programmatic", json=program)
    assert asked.status_code == 200, asked.text
    call = asked.json()["tool_calls"][0]
    body = {"continuation_token": asked.json()["continuation_token"],
            "tool_results": [{"call_id": call["id"], "result": {"sky": "clear"}, "is_error": False}]}  # fmt: skip
    done = client.post("/v1/exec/programmatic", json=body)
    assert (done.status_code, done.json()["stdout"]) == (200, "{'sky': 'clear'}\n")
    replayed = client.post("/v1/exec/programmatic", json=body)  # its record was replaced: the round ran
    assert replayed.status_code == 409 and "spent" in replayed.json()["details"]


# -- 11. Say what you cannot do --------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "code", "stdout"),
    [
        ("py", "import sys; print(6 * 7, sys.argv[1:])", "42 ['a b', 'c']\n"),
        ("js", "console.log(6 * 7, process.argv.slice(2))", "42 [ 'a b', 'c' ]\n"),
        ("ts", "const n: number = 6 * 7; console.log(n, process.argv.slice(2));", "42 [ 'a b', 'c' ]\n"),
        ("bash", 'echo "$((6 * 7))" "$1|$2"', "42 a b|c\n"),
    ],
)
def test_say_what_you_cannot_do_and_every_language_said_runs(
    client: TestClient, sandboxes: Sandboxes, lang: str, code: str, stdout: str
) -> None:
    if lang not in sandboxes.languages:
        pytest.skip(f"the backend does not list {lang} in its languages")
    body = run(client, code, lang=lang, args=["a b", "c"])
    assert (body["stdout"], body["stderr"]) == (stdout, "")


def test_say_what_you_cannot_do_and_a_language_not_said_is_a_400(client: TestClient, sandboxes: Sandboxes) -> None:
    said = sorted(client.get("/health").json()["languages"])
    assert said == sorted(sandboxes.languages) and {"py", "bash"} <= set(said)
    for lang in ["cobol", *(lang for lang in ("ts", "js", "c") if lang not in said)]:
        reply = client.post("/v1/exec", json={"lang": lang, "code": "x"})
        assert reply.status_code == 400
        assert reply.json()["details"].endswith(f"available: {', '.join(said)}")


def test_say_what_you_cannot_do_and_named_sessions_are_kept_or_refused(
    client: TestClient, sandboxes: Sandboxes
) -> None:
    def stateful(code: str) -> Any:
        body = {"lang": "bash", "code": code, "runtime_session_hint": "conversation-7", "user_id": ALICE}
        return client.post("/v1/exec", json=body, headers={"X-CodeAPI-Expected-Profile": "stateful"})

    first = stateful("echo kept > notes.txt")
    if not sandboxes.named_sessions:  # the stateful profile is then refused, saying why
        assert (first.status_code, first.json()["code"]) == (409, "execution_profile_mismatch")
        return
    assert first.status_code == 200, first.text
    later = stateful("cat notes.txt").json()
    assert (later["session_id"], later["stdout"]) == (first.json()["session_id"], "kept\n")


def test_say_what_you_cannot_do_and_files_are_at_mnt_data_where_said(client: TestClient, sandboxes: Sandboxes) -> None:
    """LibreChat tells the model its files are in /mnt/data, and its own read_file and
    write_file helpers use absolute paths: every language and bash must find them there."""
    if not sandboxes.mnt_data:
        pytest.skip("the backend says mnt_data=False: its programs run in a directory of their own")
    session = upload(client, "data.csv", b"a,b\n")["session_id"]
    for lang, code, name in (
        ("py", "open('/mnt/data/from_py.txt', 'w').write('py')", "from_py.txt"),
        ("js", "require('fs').writeFileSync('/mnt/data/from_js.txt', 'js')", "from_js.txt"),
        ("ts", "import * as fs from 'fs'; fs.writeFileSync('/mnt/data/from_ts.txt', 'ts');", "from_ts.txt"),
        ("bash", "echo -n bash > /mnt/data/from_bash.txt", "from_bash.txt"),
    ):
        if lang not in sandboxes.languages:
            continue
        body = run(client, code, lang=lang, session_id=session)
        assert names(body) == [name], (lang, body)
        assert body["files"][0]["id"] == file_id(session, name)  # ids and names as on every backend
        assert client.get(f"/v1/download/{session}/{body['files'][0]['id']}").text == name.split("_")[1][:-4]
    read = "print(open('/mnt/data/data.csv').read(), open('/mnt/data/from_bash.txt').read())"
    assert run(client, read, session_id=session)["stdout"] == "a,b\n bash\n"
    assert run(client, "cat /mnt/data/from_py.txt; pwd", lang="bash", session_id=session)["stdout"] == "py/mnt/data\n"


def test_say_what_you_cannot_do_and_a_cancel_stops_a_run_where_said(client: TestClient, sandboxes: Sandboxes) -> None:
    request_id = "4b6f9e1c-7a53-4f0e-9a8e-0c1d2e3f4a5b"
    reply: dict[str, Any] = {}
    headers = {"X-LibreChat-Code-Request-ID": request_id}
    code = "sleep 3; echo finished"
    running = threading.Thread(target=lambda: reply.update(client.post("/v1/exec", json={"lang": "bash", "code": code},
                                                                      headers=headers).json()))  # fmt: skip
    running.start()
    time.sleep(1)
    assert client.post("/v1/exec/programmatic/cancel", json={"request_id": request_id}).status_code == 200
    running.join(30)
    if sandboxes.cancels:
        assert "Stopped: the run was cancelled." in reply["stderr"] and "finished" not in reply["stdout"]
    else:  # a no-op, as said: the run goes to its end
        assert reply["stdout"] == "finished\n"


def test_say_what_you_cannot_do_and_a_lease_is_read_untouched(
    backend: Backend, client: TestClient, sandboxes: Sandboxes
) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    first = sandboxes.lease(session)
    time.sleep(0.2)
    assert sandboxes.lease(session) == first == listed(backend)[session]
    with pytest.raises(SessionNotFound):
        sandboxes.lease(NOBODY)


def test_say_what_you_cannot_do_and_a_run_says_how_it_started_where_it_can(
    backend: Backend, service: Service, client: TestClient
) -> None:
    """The run metrics' `start` label: warm or cold, and `remote` only where the backend
    cannot know (AgentCore's interpreter is AWS's)."""
    assert run(client, "print(1)")["stdout"] == "1\n"
    metrics = service.telemetry.metrics
    assert metrics is not None
    starts = {
        sample.labels["start"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "codeexec_run_seconds_count" and sample.value
    }
    assert starts == {"remote"} if backend.name == "agentcore" else len(starts) == 1 and starts < {"warm", "cold"}


# -- the API, the same on every backend ------------------------------------------------------


def test_a_failing_program_is_a_200_with_its_stderr(client: TestClient) -> None:
    body = run(client, "raise SystemExit('boom')")
    assert body["stdout"] == ""
    assert "boom" in body["stderr"]


def test_delete_and_unknown_files(client: TestClient) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    assert client.delete(f"/v1/files/{session}/{file_id(session, 'a.txt')}").status_code == 200
    assert client.get(f"/v1/download/{session}/a.txt").status_code == 404
    assert client.get(f"/v1/files/{session}").json() == []


@pytest.mark.parametrize("lang", ["js", "ts"])
def test_javascript_runs_on_node(client: TestClient, sandboxes: Sandboxes, lang: str) -> None:
    if lang not in sandboxes.languages:
        pytest.skip(f"the backend does not list {lang} in its languages")
    body = run(client, "console.log(typeof Deno, typeof require, typeof process.versions.node)", lang=lang)
    assert body["stdout"] == "undefined function string\n"


def test_bash_answers_stdout_and_stderr_apart_byte_for_byte(client: TestClient) -> None:
    code = "echo one; echo two >&2; printf 'crlf\\r\\nno newline'; printf '\\x01 tab\\t' >&2; exit 3"
    body = run(client, code, lang="bash")
    assert (body["stdout"], body["stderr"]) == ("one\ncrlf\r\nno newline", "two\n\x01 tab\t")
