"""A runner from the service's settings: the `local` backend they describe, and RUNNER_KEY."""

from __future__ import annotations

from ..sandbox import make_sandboxes
from ..sandbox.local import LocalSandboxes
from ..settings import Settings
from .app import Runner


def build_runner(settings: Settings) -> Runner:
    sandboxes = make_sandboxes(settings.model_copy(update={"sandbox_backend": "local"}))
    assert isinstance(sandboxes, LocalSandboxes)
    key = settings.runner_key.get_secret_value() if settings.runner_key else None
    return Runner(sandboxes, key or None)
