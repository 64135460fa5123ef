"""Admission control: how many calls of each kind this process takes on at once.

Runs hold a sandbox, memory and a core for seconds; an upload may wait for a run in its
session. So each has a bounded number of slots, and a call that finds none is refused
at once with a 429 and a retry hint, never queued behind the others. Runs go to threads
of their own, so however many there are, downloads, listings and /health (which needs
no thread at all) always find one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..errors import RateLimited

T = TypeVar("T")
# Memory the service keeps for itself before it counts runs' memory.
_RESERVE_BYTES = 1 << 30
_RUNS_PER_CORE = 4  # most runs wait on little: a core each would leave cores idle


def default_runs(memory_bytes: int) -> int:
    """What the host allows: a few runs per core, and no more than its memory holds."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    by_memory = (pages - _RESERVE_BYTES) // max(memory_bytes, 1)
    return max(1, min(_RUNS_PER_CORE * (os.cpu_count() or 1), by_memory))


class Admission:
    def __init__(self, runs: int, uploads: int) -> None:
        self._runs = threading.BoundedSemaphore(runs)
        self._uploads = threading.BoundedSemaphore(uploads)
        self._run_threads = ThreadPoolExecutor(max_workers=runs, thread_name_prefix="run")
        self.runs = runs

    def start_run(self, work: Callable[[], T]) -> Future[T]:
        """Start a run in a thread of its own, or RateLimited when all slots are taken."""
        if not self._runs.acquire(blocking=False):
            raise RateLimited(f"all {self.runs} run slots are taken; try again shortly", retry_after=2)
        try:
            future = self._run_threads.submit(work)
        except BaseException:
            self._runs.release()
            raise
        future.add_done_callback(lambda _: self._runs.release())
        return future

    @contextlib.contextmanager
    def upload(self) -> Iterator[None]:
        if not self._uploads.acquire(blocking=False):
            raise RateLimited("too many uploads at once; try again shortly")
        try:
            yield
        finally:
            self._uploads.release()
