"""A runner in a container, with what Swarm can give one and nothing more: CAP_SYS_ADMIN, the
engine's own seccomp profile (an engine started with deploy/runner-seccomp.json as its
default, as a Swarm node of runners is), the runtime's covers over /proc, a read-only
/sys/fs/cgroup. No security_opt: the runner makes /proc and its cgroups usable itself
(codeexec.runner.container).

The container is of an empty image with the machine's own files bound into it read-only
(the toolchains, /opt/sandbox, this checkout and its interpreter): the code under test is
the checkout's, started in seconds, and the boundary it meets is the engine's. The image
itself is the compose and swarm tests' to run.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from pydantic import SecretStr

from codeexec.settings import Settings

from ..serving import RUNNER_KEY, free_port
from .engines import Engine

ROOT = Path(__file__).parent.parent.parent
SECCOMP = ROOT / "deploy" / "runner-seccomp.json"
# What a runner and its runs read; everything else of the machine stays out of sight.
_HOST_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt/sandbox", "/var/cache/codeexec")
PRIVILEGES = ("--cap-add", "SYS_ADMIN")


def settings_env(settings: Settings) -> list[str]:
    """`docker run -e` arguments that make the runner's Settings() these."""
    args = []
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, frozenset | set):
            value = ",".join(sorted(str(v) for v in value))
        elif isinstance(value, list | tuple):  # in order: RUNNER_URLS' i-th is runner i
            value = ",".join(str(v) for v in value)
        args += ["-e", f"{name.upper()}={value}"]
    return args


@contextlib.contextmanager
def runner_container(engine: Engine, image: str, settings: Settings) -> Iterator[str]:
    """The runner of these settings in a container, on 127.0.0.1; yields its URL."""
    port, name = free_port(), f"runner-{secrets.token_hex(4)}"
    binds = {*_HOST_DIRS, sys.base_prefix, str(ROOT)}
    volumes = [arg for path in sorted(binds) if Path(path).exists() for arg in ("-v", f"{path}:{path}:ro")]
    root = settings.sandbox_root
    env = settings_env(settings.model_copy(update={"runner_key": SecretStr(RUNNER_KEY)}))
    engine.docker(
        "run", "-d", "--name", name, "--network", "host", "--tmpfs", "/tmp", "--tmpfs", "/run", *PRIVILEGES,
        *volumes, "-v", f"{root}:{root}", *env, "-e", "RUNNER_HOST=127.0.0.1", "-e", f"RUNNER_PORT={port}",
        "-w", str(ROOT), image, sys.executable, "-m", "codeexec.runner",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(url):
            running = engine.docker("inspect", "--format", "{{.State.Running}}", name)
            assert running == "true" and time.monotonic() < deadline, engine.docker("logs", name)
            time.sleep(0.2)
        yield url
    finally:
        engine.docker("rm", "-f", name, check=False)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
