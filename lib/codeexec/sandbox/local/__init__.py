"""The `local` backend: bubblewrap sandboxes on this host (see sandboxes.py)."""

from .limits import Limits
from .sandboxes import LocalConfig, LocalSandbox, LocalSandboxes

__all__ = ["Limits", "LocalConfig", "LocalSandbox", "LocalSandboxes"]
