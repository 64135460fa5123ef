"""What each owner holds on this host: bytes and sessions, by user and by organization, for
the storage quotas and the console, without a walk of the disk.

A session's bytes are its quota group's (btrfs counts them as they are written: data and
metadata, the same figure its limit holds it to), read from sysfs, two small files a session;
its owner is its lease's, read once and kept (a lease never changes). A pass over 10,000
sessions reads 10,000 such files, so it runs in a thread of its own every REFRESH_SECONDS,
and readers get the last pass: a quota sees a user's other sessions as they were at most that
long ago (docs/operations.md says what that allows), and never waits for a pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...timers import Every
from ..port import OwnerTag
from . import btrfs

log = logging.getLogger("codeexec.usage")

REFRESH_SECONDS = 5.0
TOP = 20  # owners told to the console, by bytes and by sessions each
# How long a change to an owner who now holds nothing is remembered, in passes (an hour at
# the default pace): a fleet's service asks every few seconds, and one that asks from
# further back is told everything, so what the index remembers is bounded by who holds
# something now, not by every owner it ever saw.
REMEMBERED_PASSES = 720

@dataclass(frozen=True)
class Held:
    bytes: int = 0
    sessions: int = 0

@dataclass(frozen=True)
class Usage:
    """One pass: what each user and each organization (their digests) holds on this host."""

    users: dict[OwnerTag, Held] = field(default_factory=dict)
    orgs: dict[str, Held] = field(default_factory=dict)

    def of(self, owner: OwnerTag) -> tuple[Held, Held]:
        return self.users.get(owner, Held()), self.orgs.get(owner.org, Held())

    def top(self, count: int = TOP) -> dict[str, list[dict[str, Any]]]:
        """Who holds most, by bytes and by sessions, as JSON (the console adds up hosts')."""

        def most(held: dict[Any, Held]) -> list[Any]:
            by_bytes = sorted(held, key=lambda k: held[k].bytes, reverse=True)[:count]
            by_sessions = sorted(held, key=lambda k: held[k].sessions, reverse=True)[:count]
            return list(dict.fromkeys(by_bytes + by_sessions))

        return {
            "users": [{"org": o.org, "user": o.user, **asdict(self.users[o])} for o in most(self.users)],
            "tenants": [{"org": org, **asdict(self.orgs[org])} for org in most(self.orgs)],
        }

    def bytes_by_digest(self) -> dict[str, int]:
        """Bytes by user digest (it names its organization too) and by organization digest:
        what a fleet's service adds up across hosts."""
        return {**{o.user: h.bytes for o, h in self.users.items()}, **{o: h.bytes for o, h in self.orgs.items()}}


class UsageIndex:
    def __init__(self, root: Path, mine: Callable[[str], bool], refresh_seconds: float = REFRESH_SECONDS) -> None:
        """`mine`: whether a name under the root is a session of this host's (runners of a
        fleet may share one root: each counts the sessions it made)."""
        self._root = root
        self._mine = mine
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._filesystem = btrfs.filesystem_id(fd)
        finally:
            os.close(fd)
        self._known: dict[str, tuple[OwnerTag, int]] = {}  # session: its owner and its subvolume
        self.now = Usage()
        self._clock = Every(refresh_seconds, self.refresh, "usage pass")
        # Which pass last changed each owner's bytes, so a fleet's service asks only for what
        # changed since it last asked; `epoch` tells it that this process started again.
        self.epoch = os.urandom(8).hex()
        self.generation = 0
        self._changed: dict[str, int] = {}
        self._forgotten = 0  # the newest pass whose changes are no longer all remembered
        self._lock = threading.Lock()

    def start(self) -> None:
        self.refresh()
        self._clock.start()

    def close(self) -> None:
        self._clock.stop()

    def session_bytes(self, session: str) -> int | None:
        """A session's bytes now, when the index knows its subvolume."""
        known = self._known.get(session)
        return self._held(known[1]) if known else None

    def refresh(self) -> None:
        users: Counter[OwnerTag] = Counter()
        orgs: Counter[str] = Counter()
        user_sessions: Counter[OwnerTag] = Counter()
        org_sessions: Counter[str] = Counter()
        present = set()
        for session, owner, subvolume in self._sessions():
            present.add(session)
            size = self._held(subvolume) or 0
            users[owner] += size
            orgs[owner.org] += size
            user_sessions[owner] += 1
            org_sessions[owner.org] += 1
        for gone in self._known.keys() - present:
            del self._known[gone]
        made = Usage(
            {owner: Held(users[owner], user_sessions[owner]) for owner in user_sessions},
            {org: Held(orgs[org], org_sessions[org]) for org in org_sessions},
        )
        with self._lock:
            before, after = self.now.bytes_by_digest(), made.bytes_by_digest()
            changed = {d for d in before.keys() | after.keys() if before.get(d) != after.get(d)}
            if changed:
                self.generation += 1
                self._changed.update(dict.fromkeys(changed, self.generation))
            self.now = made
            self._forget(after)

    def _forget(self, held: dict[str, int]) -> None:
        """Drop the changes to owners who hold nothing now, once they are older than
        REMEMBERED_PASSES (under the lock)."""
        horizon = self.generation - REMEMBERED_PASSES
        old = [d for d, g in self._changed.items() if g <= horizon and d not in held]
        for digest in old:
            self._forgotten = max(self._forgotten, self._changed.pop(digest))

    def changes(self, epoch: str, since: int) -> dict[str, Any]:
        """The owners whose bytes changed after pass `since` of process `epoch` (all of them
        when that is not this process's, or `since` is older than what it remembers), by
        digest; 0 for one that holds nothing now."""
        with self._lock:
            whole = epoch != self.epoch or since < self._forgotten
            held = self.now.bytes_by_digest()
            changed = held.keys() if whole else {d for d, g in self._changed.items() if g > since}
            return {"epoch": self.epoch, "generation": self.generation, "whole": whole,
                    "bytes": {d: held.get(d, 0) for d in changed}}  # fmt: skip

    def _sessions(self) -> Iterator[tuple[str, OwnerTag, int]]:
        with os.scandir(self._root) as entries:
            for entry in entries:
                if not self._mine(entry.name):
                    continue
                known = self._known.get(entry.name) or self._learn(entry.name)
                if known is not None:
                    yield entry.name, *known

    def _learn(self, session: str) -> tuple[OwnerTag, int] | None:
        """A session's owner and subvolume, once its lease is whole (a session being made
        has none yet: the next pass learns it)."""
        path = self._root / session
        try:
            lease = json.loads((path / "lease.json").read_text())
            owner = OwnerTag(str(lease["owner"]["org"]), str(lease["owner"]["user"]))
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            subvolume = btrfs.subvolume_id(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        self._known[session] = owner, subvolume
        return owner, subvolume

    def _held(self, subvolume: int) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return btrfs.held(self._filesystem, subvolume)
        return None
