"""The service: the one object that owns what a service process starts and stops.

Made once per process from the settings (a Lambda cold start pays it once), it holds what
every request needs (the sessions over a backend, programmatic workflows, who is calling,
admission) and what runs beside the requests (the reaper's timer). It is the process's
lifetime, as an httpx `Client` owns its connections: made, it can serve (a backend may
begin warming its interpreters as it is made); `start()` starts its timers; `close()`
stops them and lets go of the backend's warm servers and runner connections, once.

The app's lifespan starts and closes it (api/app.py), so the embedded server's stop closes
it; the Lambda handler owns one per execution environment (handlers/api.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from ..auth import Authenticator, make_authenticator
from ..large_files import LargeFiles
from ..programmatic import Programs, Tokens
from ..reaper import ReapReport, reap
from ..sandbox import make_sandboxes
from ..sandbox.port import Sandboxes
from ..sessions import SessionLimits, Sessions
from ..settings import Settings
from ..telemetry import Telemetry
from ..timers import Every
from .admission import Admission, default_runs


class Service:
    def __init__(
        self,
        settings: Settings,
        sandboxes: Sandboxes | None = None,
        api_key: Callable[[], str | None] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """`sandboxes`: a backend made elsewhere, which the service then owns as its own;
        `api_key`: where the service key comes from (a secret store), else the settings;
        `telemetry`: where its figures go (on Lambda, CloudWatch), else Prometheus metrics."""
        self.settings = settings
        if api_key is None:
            secret = settings.code_exec_api_key
            api_key = lambda: secret.get_secret_value() if secret else None  # noqa: E731
        self.sandboxes = sandboxes or make_sandboxes(settings)
        self.telemetry = telemetry or Telemetry.for_server("service", self.sandboxes.hosts)
        runs = settings.max_concurrent_runs or default_runs(settings.run_memory_bytes)
        self.admission = Admission(runs, settings.max_concurrent_uploads)
        large_files = None
        if settings.large_files_bucket:
            large_files = LargeFiles(settings.large_files_bucket, settings.large_files_from_bytes)
        self.sessions = Sessions(
            self.sandboxes, _limits(settings), large_files, self.admission.run_slot, self.admission.listing_slot
        )
        self.programs = Programs(self.sessions, Tokens(_token_secret(settings, api_key)))
        self.auth: Authenticator = make_authenticator(settings, api_key)
        self._reaper = Every(settings.reap_interval_seconds, self.reap, "reaper")
        self._closing = threading.Lock()
        self.closed = False

    def start(self) -> Service:
        """Start the reaper's timer (where a process serves HTTP; Lambda has a schedule)."""
        self._reaper.start()
        return self

    def reap(self) -> ReapReport:
        """One pass of the reaper over this service's backend."""
        report = reap(self.sandboxes, self.settings.idle_timeout_seconds)
        self.telemetry.reaped(report)
        return report

    def close(self) -> None:
        """Stop the timers, then let go of the backend; a second close does nothing."""
        with self._closing:
            if self.closed:
                return
            self.closed = True
        self._reaper.stop()
        self.sandboxes.close()

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _limits(settings: Settings) -> SessionLimits:
    return SessionLimits(
        run_timeout_seconds=settings.run_timeout_seconds,
        max_files_per_run=settings.max_files_per_run,
        max_upload_bytes=settings.max_upload_bytes,
        max_user_bytes=settings.max_user_bytes,
        max_tenant_bytes=settings.max_tenant_bytes,
    )


def _token_secret(settings: Settings, api_key: Callable[[], str | None]) -> Callable[[], bytes | None]:
    def secret() -> bytes | None:
        configured = settings.code_exec_token_secret
        key = configured.get_secret_value() if configured else api_key()
        return key.encode() if key else None

    return secret
