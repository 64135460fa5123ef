"""The `runner` backend: sandboxes leased from a runner over HTTP (see sandboxes.py)."""

from .client import RunnerClient
from .sandboxes import RunnerConfig, RunnerPort, RunnerSandboxes

__all__ = ["RunnerClient", "RunnerConfig", "RunnerPort", "RunnerSandboxes"]
