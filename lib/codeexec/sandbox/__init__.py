"""Sandbox backends behind one port (`port.py`), chosen by SANDBOX_BACKEND from a table.

Backends take their configuration as plain values, read here from the settings: none of
them knows the service's `Settings`. Each is imported only when chosen, so a deployment
loads only the backend it uses (cold starts).
"""

from __future__ import annotations

from collections.abc import Callable

from ..settings import Settings
from .port import Sandboxes


def make_sandboxes(settings: Settings) -> Sandboxes:
    return _BACKENDS[settings.sandbox_backend](settings)


def _local(settings: Settings) -> Sandboxes:
    from .local import Limits, LocalConfig, LocalSandboxes

    limits = Limits(
        cpu_seconds=settings.run_cpu_seconds,
        memory_bytes=settings.run_memory_bytes,
        max_processes=settings.run_max_processes,
        max_output_bytes=settings.max_output_bytes,
        max_file_bytes=settings.max_file_bytes,
        max_session_bytes=settings.max_session_bytes,
        cpus=settings.run_cpus,
    )
    return LocalSandboxes(
        LocalConfig(
            root=settings.sandbox_root,
            lease_ttl_seconds=settings.lease_ttl_seconds,
            limits=limits,
            sandbox_uid=settings.sandbox_uid,
            sandbox_gid=settings.sandbox_gid,
            use_cgroups=settings.sandbox_cgroups,
            image_bytes=settings.sandbox_image_bytes,
            warm_python=settings.warm_python,
            warm_sandboxes=settings.warm_sandboxes,
            warm_scientific=settings.warm_scientific,
            hold_wait_seconds=_hold_wait(settings),
            runner_index=settings.fleet_index(),
        )
    )


def _hold_wait(settings: Settings) -> float:
    """How long a call waits for a session another call holds: the longest run (compilers
    get at least a minute), and a little more."""
    return max(settings.run_timeout_seconds, 60) + 15


def _memory(settings: Settings) -> Sandboxes:
    from .memory import MemoryConfig, MemorySandboxes

    return MemorySandboxes(
        MemoryConfig(settings.lease_ttl_seconds, settings.max_output_bytes, hold_wait_seconds=_hold_wait(settings))
    )


def _agentcore(settings: Settings) -> Sandboxes:
    from .agentcore import AgentCoreConfig, AgentCoreSandboxes

    return AgentCoreSandboxes(
        AgentCoreConfig(
            interpreter_id=settings.agentcore_code_interpreter_id,
            endpoint_url=settings.agentcore_endpoint_url,
            lease_ttl_seconds=settings.lease_ttl_seconds,
            run_timeout_seconds=settings.run_timeout_seconds,
            max_output_bytes=settings.max_output_bytes,
        )
    )


def _runner(settings: Settings) -> Sandboxes:
    from .remote import FleetConfig, RunnerFleet

    fleet = settings.fleet_urls()
    if not ((fleet or settings.runner_url) and _runner_key(settings)):
        raise RuntimeError("SANDBOX_BACKEND=runner needs RUNNER_KEY and RUNNER_URL (or RUNNER_URLS)")
    urls = fleet or (str(settings.runner_url),)
    return RunnerFleet(
        FleetConfig(
            urls,
            _runner_key(settings),
            settings.run_timeout_seconds,
            routed=bool(fleet),
            connect_seconds=settings.runner_connect_timeout_seconds,
            quotas=bool(settings.max_user_bytes or settings.max_tenant_bytes or settings.code_exec_api_keys_file),
        )
    )


def _microvm(settings: Settings) -> Sandboxes:
    from .microvm import MicrovmConfig, MicrovmSandboxes

    if not (settings.microvm_image and _runner_key(settings)):
        raise RuntimeError("SANDBOX_BACKEND=microvm needs MICROVM_IMAGE and RUNNER_KEY")
    return MicrovmSandboxes(
        MicrovmConfig(
            image=settings.microvm_image,
            runner_key=_runner_key(settings),
            lease_ttl_seconds=settings.lease_ttl_seconds,
            idle_timeout_seconds=settings.idle_timeout_seconds,
            run_timeout_seconds=settings.run_timeout_seconds,
            egress_connector=settings.microvm_egress_connector,
            ingress_connector=settings.microvm_ingress_connector,
            endpoint_url=settings.microvm_endpoint_url,
            boot_seconds=settings.microvm_boot_seconds,
        )
    )


def _runner_key(settings: Settings) -> str:
    return settings.runner_key.get_secret_value() if settings.runner_key else ""


_BACKENDS: dict[str, Callable[[Settings], Sandboxes]] = {
    "local": _local,
    "memory": _memory,
    "agentcore": _agentcore,
    "runner": _runner,
    "microvm": _microvm,
}
