"""Sandbox backends behind one port (`port.py`), chosen by SANDBOX_BACKEND.

Backends take their configuration as plain values, read here from the settings: none of
them knows the service's `Settings`.
"""

from __future__ import annotations

from ..settings import Settings
from .port import Sandboxes


def make_sandboxes(settings: Settings) -> Sandboxes:
    # Imported here so a deployment loads only the backend it uses (cold starts).
    if settings.sandbox_backend == "local":
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
                # The longest run (compilers get at least a minute), and a little more.
                hold_wait_seconds=max(settings.run_timeout_seconds, 60) + 15,
            )
        )
    if settings.sandbox_backend == "agentcore":
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
    if settings.sandbox_backend == "runner":
        from .runner import RunnerConfig, RunnerSandboxes

        if not (settings.runner_url and _runner_key(settings)):
            raise RuntimeError("SANDBOX_BACKEND=runner needs RUNNER_URL and RUNNER_KEY")
        return RunnerSandboxes(
            RunnerConfig(
                url=settings.runner_url,
                key=_runner_key(settings),
                run_timeout_seconds=settings.run_timeout_seconds,
            )
        )
    if settings.sandbox_backend == "microvm":
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
    raise RuntimeError(f"SANDBOX_BACKEND={settings.sandbox_backend} is not available")


def _runner_key(settings: Settings) -> str:
    return settings.runner_key.get_secret_value() if settings.runner_key else ""
