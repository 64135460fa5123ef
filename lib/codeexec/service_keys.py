"""Named service keys (CODE_EXEC_API_KEYS_FILE): one key for each LibreChat instance or team
an operator serves, each with its own name and, optionally, its own organization and limits.

The file holds one key a line, as JSON; blank lines and lines starting with `#` are skipped:

    {"name": "librechat-eu", "sha256": "<hex of the key's SHA-256>", "org": "eu",
     "runs_at_once": 8, "runs_per_minute": 120, "stored_bytes": 10737418240}

Only the key's hash is kept (a key is 32 random bytes: its SHA-256 is as good as a slow hash
and costs nothing per call); `python -m codeexec.keys service-key NAME` makes a key and prints
its line. Two lines with one name are one key being rotated: both open until the old line
goes. The name is what the console, the metrics (`key`) and the log lines say; the key never.
CODE_EXEC_API_KEY, beside the file or instead of it, is the key named `default`.

The file is read again when it changes (a Kubernetes Secret mounted as a file is replaced by a
symlink swap: its stat changes), at most once a second, on the next call. A change that does
not parse keeps the keys read before, and says which line is wrong, never what it holds. At
start, a file that does not parse refuses the start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

log = logging.getLogger("codeexec.keys")

CHECK_SECONDS = 1.0
DEFAULT_KEY = "default"  # the name of CODE_EXEC_API_KEY, a key with no limits of its own


class ServiceKey(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,64}$")]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    # The organization its callers' sessions belong to (else CODE_EXEC_ORG): keys of two
    # instances with one org share their organization's shared files and quota.
    org: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    runs_at_once: Annotated[int, Field(ge=1)] | None = None  # in flight at once, this replica
    runs_per_minute: Annotated[int, Field(ge=1)] | None = None  # started a minute, this replica
    stored_bytes: Annotated[int, Field(ge=0)] | None = None  # its organization's sessions together


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ServiceKeys:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp: tuple[int, int, int] | None = None
        self._keys = parse(path.read_text())  # at start, a file that does not parse refuses it
        self._stamp = _stamp(path)

    def keys(self) -> list[ServiceKey]:
        self._reload_if_changed()
        return list(self._keys.values())

    def find(self, presented: str) -> ServiceKey | None:
        """The key presented, if it is one of the file's."""
        self._reload_if_changed()
        return self._keys.get(key_hash(presented))

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if now - self._checked < CHECK_SECONDS or not self._lock.acquire(blocking=False):
            return
        try:
            self._checked = now
            stamp = _stamp(self._path)
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                self._keys = parse(self._path.read_text())
                log.info("read %d service keys from %s", len(self._keys), self._path)
            except (OSError, ValueError) as exc:
                log.error("kept the service keys read before: %s: %s", self._path, exc)
        finally:
            self._lock.release()


def parse(text: str) -> dict[str, ServiceKey]:
    """The keys of a file's text, by hash; ValueError naming the first wrong line."""
    keys: dict[str, ServiceKey] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            key = ServiceKey.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            # Not the line itself: it may hold a key pasted where its hash belongs.
            raise ValueError(f"line {number} is not a service key (see docs/operations.md)") from None
        if key.sha256 in keys:
            raise ValueError(f"line {number} repeats the key of another line")
        keys[key.sha256] = key
    return keys


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)  # through the symlinks a mounted Secret swaps
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size
