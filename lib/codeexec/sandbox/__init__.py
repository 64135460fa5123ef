"""Sandbox backends behind one port (`port.py`), chosen by SANDBOX_BACKEND."""

from __future__ import annotations

from ..settings import Settings
from .port import Sandboxes


def make_sandboxes(settings: Settings) -> Sandboxes:
    # Imported here so a deployment loads only the backend it uses (cold starts).
    if settings.sandbox_backend == "local":
        from .local import LocalSandboxes

        return LocalSandboxes(settings)
    if settings.sandbox_backend == "agentcore":
        from .agentcore import AgentCoreSandboxes

        return AgentCoreSandboxes(settings)
    raise RuntimeError(f"SANDBOX_BACKEND={settings.sandbox_backend} is not available")
