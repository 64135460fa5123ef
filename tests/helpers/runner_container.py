"""A runner in a container, with the grants of one profile (CODEEXEC_TEST_CONTAINER_PROFILE)
and nothing more; both under the engine's own seccomp profile (an engine started with
deploy/runner-seccomp.json as its default, as a Swarm node of runners is, or a pod's
`Localhost` profile):

- `swarm` (the default): what Swarm can give one: CAP_SYS_ADMIN, the runtime's covers over
  /proc, a read-only /sys/fs/cgroup. No security_opt: the runner makes /proc and its cgroups
  usable itself (codeexec.runner.container).
- `baseline`: the Helm chart's Pod Security "baseline" profile (docs/kubernetes.md): no
  CAP_SYS_ADMIN, only capabilities of the runtime's default set, no_new_privs
  (`allowPrivilegeEscalation: false`), /proc without covers (`procMount: Unmasked`), and
  the container in a user namespace of its own (`hostUsers: false`: the engine remaps its
  containers' uids). Its sandbox root is handed over as a pod's volume appears in it:
  owned by the container's root.

The container is of an empty image with the machine's own files bound into it read-only
(the toolchains, /opt/sandbox, this checkout and its interpreter): the code under test is
the checkout's, started in seconds, and the boundary it meets is the engine's. The image
itself is the compose and swarm tests' to run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from pydantic import SecretStr

from codeexec.settings import Settings

from ..serving import RUNNER_KEY, free_port
from . import engines
from .engines import Engine

ROOT = Path(__file__).parent.parent.parent
SECCOMP = ROOT / "deploy" / "runner-seccomp.json"
# What a runner and its runs read; everything else of the machine stays out of sight.
_HOST_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt/sandbox", "/var/cache/codeexec")
PROFILE = os.environ.get("CODEEXEC_TEST_CONTAINER_PROFILE", "swarm")
# The chart's profiles/baseline.yaml adds exactly these (tests/deploy/test_helm.py checks it).
BASELINE_CAPABILITIES = ("SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL")
GRANTS = {
    "swarm": ("--cap-add", "SYS_ADMIN"),
    "baseline": (
        "--cap-drop", "ALL", *(arg for cap in BASELINE_CAPABILITIES for arg in ("--cap-add", cap)),
        "--security-opt", "systempaths=unconfined", "--security-opt", "no-new-privileges",
    ),
}  # fmt: skip
USERNS = PROFILE == "baseline"
# What the baseline grants hold less well than Swarm's, each test that shows it and why
# (docs/kubernetes.md "Without added privilege"): expected to fail there, strictly, so that
# a change either way shows. Measured on cgroup v1 with Docker 20.10; every other test passes.
_NO_PIDS_CGROUP = "no pids cgroup the runner may write: RLIMIT_NPROC of the sandbox uid stops it, unreported"
_NO_MEMORY_CGROUP = "no memory cgroup the runner may write: RLIMIT_AS holds each process, not the run"
_NO_QUOTA = "no quota group limit without CAP_SYS_ADMIN: a session is held by the volume's size, not its own"
WEAKER = {
    "baseline": {
        "test_a_fork_bomb_ends_and_leaves_nothing_behind": _NO_PIDS_CGROUP,
        "test_processes_and_threads": _NO_PIDS_CGROUP,
        "test_memory": _NO_MEMORY_CGROUP,
        "test_a_ram_disk_counts_as_memory": _NO_MEMORY_CGROUP + " (a RAM disk is held by its own size)",
        "test_rlimits_inside_the_sandbox": _NO_MEMORY_CGROUP,
        "test_a_runs_cgroup_is_removed_after_it": "no cgroup the runner may write",
        "test_a_file_that_fills_the_disk_is_stopped": _NO_QUOTA,
        "test_session_disk_for_runs_uploads_and_inputs": _NO_QUOTA,
        "test_a_full_session_may_still_shrink": _NO_QUOTA,
    },
}.get(PROFILE, {})
# A container in a user namespace may not share the machine's network namespace: it gets one
# of its own on a bridge of the engine's, reached at its address there (a subnet of the
# tests' own, beside tests/hosts.py's 10.231/16).
_NETWORK, _BRIDGE, _SUBNET = "cxrunners", "cxrunners0", "10.232.0.0/24"


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
    """The runner of these settings in a container, on 127.0.0.1 (or its own address, in a
    user namespace); yields its URL."""
    port, name = free_port(), f"runner-{secrets.token_hex(4)}"
    binds = {*_HOST_DIRS, sys.base_prefix, sys.prefix, str(ROOT)}
    volumes = [arg for path in sorted(binds) if Path(path).exists() for arg in ("-v", f"{path}:{path}:ro")]
    root = settings.sandbox_root
    if USERNS:  # root:sandbox group as the container sees it
        remapped = engines.remapped_root()
        os.chown(root, remapped, remapped + settings.sandbox_gid)
    env = settings_env(settings.model_copy(update={"runner_key": SecretStr(RUNNER_KEY)}))
    listen = "0.0.0.0" if USERNS else "127.0.0.1"
    # The checkout's library where PYTHONPATH names it (a worktree's, before the venv's own).
    if "PYTHONPATH" in os.environ:
        env += ["-e", f"PYTHONPATH={os.environ['PYTHONPATH']}"]
    engine.docker(
        "run", "-d", "--name", name, "--network", _network(engine), "--tmpfs", "/tmp", "--tmpfs", "/run",
        *GRANTS[PROFILE], *volumes, "-v", f"{root}:{root}", *env, "-e", f"RUNNER_HOST={listen}",
        "-e", f"RUNNER_PORT={port}", "-w", str(ROOT), image, sys.executable, "-m", "codeexec.runner",
    )  # fmt: skip
    try:
        address = "127.0.0.1"
        if USERNS:
            networks = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
            address = engine.docker("inspect", "--format", networks, name)
        url = f"http://{address}:{port}"
        deadline = time.monotonic() + 60
        while not _answers(url):
            running = engine.docker("inspect", "--format", "{{.State.Running}}", name)
            assert running == "true" and time.monotonic() < deadline, engine.docker("logs", name)
            time.sleep(0.2)
        yield url
    finally:
        engine.docker("rm", "-f", name, check=False)


def _network(engine: Engine) -> str:
    if not USERNS:
        return "host"
    if not engine.docker("network", "ls", "--quiet", "--filter", f"name=^{_NETWORK}$"):
        bridge = f"com.docker.network.bridge.name={_BRIDGE}"
        engine.docker("network", "create", "--subnet", _SUBNET, "--opt", bridge, _NETWORK)
    return _NETWORK


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
