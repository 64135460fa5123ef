"""Work done on a clock in a process that serves HTTP: the reaper's passes, the usage passes.

On Lambda an EventBridge schedule is the clock instead, and nothing here runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("codeexec")


class Every:
    """`work` every `seconds`, in a daemon thread of its own, from `start` to `stop`; a turn
    that fails is logged, and the next comes on time."""

    def __init__(self, seconds: float, work: Callable[[], object], name: str) -> None:
        self._seconds = seconds
        self._work = work
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self._seconds):
            try:
                self._work()
            except Exception:  # one failed turn must not end the clock
                log.exception("%s failed", self._name)
