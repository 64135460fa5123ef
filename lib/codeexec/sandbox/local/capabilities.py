"""This process's own capabilities, as /proc/self/status lists them: what a container gave
the service decides what it may do itself (remount, renice) and what it goes without."""

from __future__ import annotations

from pathlib import Path

SYS_ADMIN = 21
SYS_NICE = 23


def effective(capability: int) -> bool:
    """Whether `capability` (its number, linux/capability.h) is in the effective set."""
    status = Path("/proc/self/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
    return bool(int(mask, 16) >> capability & 1)
