"""The `runner` backend: sandboxes leased from one runner or a fleet over HTTP (fleet.py),
each call one request to one runner's port (sandboxes.py)."""

from .client import RunnerClient
from .fleet import FleetConfig, RunnerFleet
from .sandboxes import RunnerPort, call_seconds

__all__ = ["FleetConfig", "RunnerClient", "RunnerFleet", "RunnerPort", "call_seconds"]
