"""Holds that outlive one HTTP request: a call's use of a session, and its exclusive hold.

The `local` backend holds a session with file locks for as long as a `with` block runs in
one process. A caller on the other side of HTTP opens a session, then sends several
requests (copies, a listing, the run, a listing), and only then lets go. So the runner
enters those `with` blocks on the caller's behalf and keeps them open under a token until
the caller releases it, or until it expires: a caller that died (its function was
stopped) must not hold a session for ever.

A use is the `local` backend's shared lock on the session, which its `end_if` never
waits for: the reaper keeps away from a session while a call has it open. A hold is the
session's exclusive lock on top of a use.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Held:
    session_id: str
    stack: contextlib.ExitStack
    expires: float  # time.monotonic()


@dataclass
class Holds:
    max_seconds: float  # the longest a caller may ask to keep a hold
    _held: dict[str, _Held] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(self, session_id: str, stack: contextlib.ExitStack, seconds: float) -> str:
        """Keep what `stack` holds until released or expired; returns its token."""
        token = secrets.token_urlsafe(18)
        expires = time.monotonic() + min(max(seconds, 1.0), self.max_seconds)
        with self._lock:
            self._held[token] = _Held(session_id, stack, expires)
        return token

    def release(self, session_id: str, token: str) -> bool:
        with self._lock:
            held = self._held.get(token)
            if held is None or held.session_id != session_id:
                return False
            del self._held[token]
        held.stack.close()
        return True

    def sweep(self) -> int:
        """Release every expired hold; returns how many."""
        now = time.monotonic()
        with self._lock:
            expired = [t for t, h in self._held.items() if h.expires <= now]
            stacks = [self._held.pop(t).stack for t in expired]
        for stack in stacks:
            stack.close()
        return len(stacks)

    def release_all(self) -> None:
        with self._lock:
            stacks = [h.stack for h in self._held.values()]
            self._held.clear()
        for stack in stacks:
            stack.close()


def acquire_or_abandon(enter: Callable[[contextlib.ExitStack], None], wait: float) -> contextlib.ExitStack | None:
    """Run `enter` (which may block on a lock) in a thread of its own, for at most `wait`
    seconds. A waiter that gave up leaves the thread to finish and let go at once, so no
    lock is ever held for a caller that is no longer there."""
    done = threading.Event()
    state: dict[str, object] = {}
    gave_up = threading.Lock()  # whoever takes it first decides: the waiter or the thread

    def work() -> None:
        stack = contextlib.ExitStack()
        try:
            enter(stack)
        except BaseException as exc:  # handed to the waiter below
            stack.close()
            state["error"] = exc
            done.set()
            return
        if gave_up.acquire(blocking=False):
            state["stack"] = stack
            done.set()
        else:
            stack.close()

    threading.Thread(target=work, name="hold", daemon=True).start()
    if not done.wait(wait) and gave_up.acquire(blocking=False):
        return None  # the thread will find the lock taken and let go
    done.wait()
    if "error" in state:
        raise state["error"]  # type: ignore[misc]
    stack = state["stack"]
    assert isinstance(stack, contextlib.ExitStack)
    return stack
