"""The `memory` backend: NOT A SANDBOX, for tests and trying the API (see sandboxes.py)."""

from .sandboxes import MemoryConfig, MemorySandboxes

__all__ = ["MemoryConfig", "MemorySandboxes"]
