"""The `microvm` backend: AWS Lambda MicroVMs, each running the runner (see sandboxes.py)."""

from .sandboxes import MicrovmConfig, MicrovmSandboxes

__all__ = ["MicrovmConfig", "MicrovmSandboxes"]
