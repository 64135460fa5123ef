"""Shared fixtures: a sandbox root, settings (`settings`: the `local` backend, so root;
`memory_settings`: the `memory` backend, no root and no sandbox), services (`services`:
one for any settings, closed after the test), the app in-process, and the app on loopback.

Every service a test uses comes from `services`, which makes its backend as the run asks:

With CODEEXEC_TEST_BACKEND=runner (`make test-runner`), a service for the `local` backend
leases its sandboxes from a fleet of three runners instead: started on loopback from the
very same settings (root, limits), each with its index (the service keeps its settings: it
says `local`, and its backend is the fleet).

With CODEEXEC_TEST_BACKEND=container (`make test-container`), one runner of those settings
runs in a container of an engine of the tests' own instead, with no more privilege than
Swarm can give it, or with CODEEXEC_TEST_CONTAINER_PROFILE=baseline the Helm chart's Pod
Security "baseline" grants (tests/helpers/runner_container.py).

With CODEEXEC_TEST_WARM=1 (`make test-warm`), every `local` service keeps a run made ahead
from each fork server (the interpreter with the libraries, the bare one), and waits for
them before the test: every run of the test is forked from a server (one made ahead, or
one forked on demand).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.local import LocalSandboxes, btrfs
from codeexec.sandbox.local.storage import Storage
from codeexec.sandbox.port import Sandboxes
from codeexec.settings import Settings

from .fakes.agentcore import RunningFake
from .helpers import engines
from .helpers.runner_container import SECCOMP, USERNS, WEAKER, runner_container
from .lambda_events import cold_start
from .serving import Services, fleet_settings, runner_settings, running_fleet, serving
from .serving import free_port as free_port  # tests import it from here

API_KEY = "test-key-0123456789"
CODEEXEC_TEST_BACKEND = os.environ.get("CODEEXEC_TEST_BACKEND", "local")
WARM_PYTHON = int(os.environ.get("CODEEXEC_TEST_WARM", "0"))
# Every Settings() a test makes, and every service it starts, keeps as many: a pool no
# fixture closes would keep its interpreters (about 150 MB each) to the end of the session.
# Not of the scientific server, whatever the run: its start (SciPy, scikit-learn,
# statsmodels, plotly) took four of the six seconds each test of the warm run waited, and
# backends/test_warm_scientific.py runs it (a run wanting its libraries forks from the py
# server meanwhile, and imports them itself).
os.environ["WARM_PYTHON"] = os.environ["WARM_SANDBOXES"] = str(WARM_PYTHON)
os.environ["WARM_SCIENTIFIC"] = "0"


# One btrfs filesystem for every test's sandbox root (the local backend's storage needs
# one: kernel quotas per session), made once and kept mounted for later runs.
TEST_STORAGE = Path("/var/tmp/codeexec-tests")


# Backends a parametrized fixture may name whose sandboxes are this host's (a runner, a
# fleet of them, a fake MicroVM's runner): they need the sandboxes' storage too, fetched by
# getfixturevalue.
_LOCAL_SANDBOXES = {"local", "runner", "fleet", "microvm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs the sandboxes' storage (a btrfs filesystem, bubblewrap as the
    sandbox uid) needs root: marked so, whichever fixture or parameter brought it in. Against
    a runner in a container, what its profile holds less well is expected to fail (WEAKER)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec else ()
        local = any(isinstance(param, str) and param in _LOCAL_SANDBOXES for param in params)
        if "sandbox_storage" in getattr(item, "fixturenames", ()) or local:
            item.add_marker(pytest.mark.root)
        if CODEEXEC_TEST_BACKEND == "container" and (weaker := WEAKER.get(getattr(item, "originalname", ""))):
            item.add_marker(pytest.mark.xfail(reason=weaker, strict=True))


@pytest.fixture(scope="session")
def sandbox_storage() -> Path:
    Storage.prepare(TEST_STORAGE, session_bytes=1 << 30, sandbox_gid=Settings().sandbox_gid, image_bytes=16 << 30)
    return TEST_STORAGE


@pytest.fixture
def sandbox_root(sandbox_storage: Path) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="root-", dir=sandbox_storage))
    os.chown(root, 0, Settings().sandbox_gid)  # as the service closes a root: the sandbox uid passes
    root.chmod(0o710)
    yield root
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for entry in root.iterdir():  # sessions are subvolumes: one call each, whatever is in them
        with contextlib.suppress(OSError):
            btrfs.destroy_subvolume(fd, entry.name)
    os.close(fd)
    shutil.rmtree(root, ignore_errors=True)


def base_settings(**changes: Any) -> Settings:
    """The settings every test's service starts from, with its backend's (and any other
    changes)."""
    common: dict[str, Any] = {
        "code_exec_api_key": SecretStr(API_KEY),
        "run_timeout_seconds": 20,
        # Small enough that a test can send one byte more than the limit.
        "max_upload_bytes": 5 << 20,
        # The same run slots on every machine: how many calls of one user are taken on at
        # once is a share of them.
        "max_concurrent_runs": 8,
    }
    return Settings(**common | changes)


@pytest.fixture
def settings(sandbox_root: Path) -> Settings:
    return base_settings(
        sandbox_root=sandbox_root, warm_python=WARM_PYTHON, warm_sandboxes=WARM_PYTHON, warm_scientific=0
    )


@pytest.fixture
def memory_settings() -> Settings:
    """The same settings on the `memory` backend: no root, and no sandbox (docs/backends.md)."""
    return base_settings(sandbox_backend="memory")


@pytest.fixture
def services(request: pytest.FixtureRequest) -> Iterator[Services]:
    """Services for any settings, each with the backend this run tests (see above), each
    closed after the test, with the runners or containers made for it."""
    with contextlib.ExitStack() as made:

        def service(settings: Settings) -> Service:
            sandboxes = _sandboxes(settings, made, request) if settings.sandbox_backend == "local" else None
            return made.enter_context(contextlib.closing(Service(settings, sandboxes)))

        yield service


def _sandboxes(settings: Settings, made: contextlib.ExitStack, request: pytest.FixtureRequest) -> Sandboxes:
    """A `local` service's backend as CODEEXEC_TEST_BACKEND says: its own, a fleet of runners
    of the same settings, or one such runner in a container."""
    if CODEEXEC_TEST_BACKEND == "runner":
        fleet = made.enter_context(running_fleet(settings))
        return make_sandboxes(fleet_settings(settings, [url for url, _ in fleet]))
    if CODEEXEC_TEST_BACKEND == "container":
        url = made.enter_context(runner_container(*request.getfixturevalue("runner_engine"), settings))
        return make_sandboxes(runner_settings(settings, url))
    sandboxes = make_sandboxes(settings)
    if isinstance(sandboxes, LocalSandboxes) and (settings.warm_python or settings.warm_sandboxes):
        # Runs never wait for warm interpreters, so a test could not tell which it got.
        sandboxes.launcher.warm.wait_ready()
    return sandboxes


@pytest.fixture
def local_sandboxes() -> Iterator[Callable[[Settings], LocalSandboxes]]:
    """The `local` backend itself for any settings (whatever CODEEXEC_TEST_BACKEND says: a
    test of its own steps), each closed after the test."""
    with contextlib.ExitStack() as made:

        def local(settings: Settings) -> LocalSandboxes:
            sandboxes = make_sandboxes(settings)
            assert isinstance(sandboxes, LocalSandboxes)
            return made.enter_context(contextlib.closing(sandboxes))

        yield local


@pytest.fixture
def service(services: Services, settings: Settings) -> Service:
    return services(settings)


@pytest.fixture
def app(service: Service) -> FastAPI:
    return create_app(service)


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app, headers={"X-API-Key": API_KEY})


@pytest.fixture
def live_server(app: FastAPI) -> Iterator[str]:
    """The app served by uvicorn on 127.0.0.1; yields the base URL ending in /v1. Its
    service stays the `services` fixture's: open for what runs after this server stops
    (an autouse fixture's last check)."""
    with serving(app, lifespan="off") as url:
        yield f"{url}/v1"


@pytest.fixture(scope="session")
def runner_engine() -> Iterator[tuple[engines.Engine, str]]:
    """An engine whose default seccomp profile is the runner's (a Swarm node of runners), and an empty image."""
    with engines.engine("runners", seccomp=SECCOMP, userns=USERNS) as engine:
        yield engine, engines.empty_image(engine)


@pytest.fixture
def functions(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, dict[str, str]], ModuleType]]:
    """The Lambda functions' modules, each imported afresh (a cold start: lambda_events.py),
    and each one's service closed after the test, as Lambda's SIGTERM would (whose handler
    the import sets is put back: the test process is no execution environment)."""
    made: list[ModuleType] = []
    kept = signal.getsignal(signal.SIGTERM)

    def start(module: str, env: dict[str, str]) -> ModuleType:
        made.append(cold_start(monkeypatch, module, env))
        signal.signal(signal.SIGTERM, kept)
        return made[-1]

    yield start
    for module in made:
        module.service.close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials and a region, and no profile or config file: no test reaches AWS."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def agentcore_fake(aws_env: None, tmp_path: Path) -> Iterator[RunningFake]:
    """The AgentCore data-plane fake, served on 127.0.0.1."""
    with RunningFake(tmp_path / "agentcore") as running:
        yield running
