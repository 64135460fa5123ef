"""The `runner` backend: sandboxes leased from a runner over HTTP (see sandboxes.py)."""

from .client import RunnerClient
from .sandboxes import RunnerConfig, RunnerSandbox, RunnerSandboxes, RunnerSessions

__all__ = ["RunnerClient", "RunnerConfig", "RunnerSandbox", "RunnerSandboxes", "RunnerSessions"]
