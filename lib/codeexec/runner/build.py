"""A runner from the service's settings: the `local` backend they describe, RUNNER_KEY, and
the reaper's clocks."""

from __future__ import annotations

from ..sandbox import make_sandboxes
from ..sandbox.local import LocalSandboxes
from ..settings import Settings
from .app import Runner


def build_runner(settings: Settings) -> Runner:
    sandboxes = make_sandboxes(settings.model_copy(update={"sandbox_backend": "local"}))
    assert isinstance(sandboxes, LocalSandboxes)
    key = settings.runner_key.get_secret_value() if settings.runner_key else None
    return Runner(sandboxes, key or None, settings.idle_timeout_seconds, settings.reap_interval_seconds)
