"""`python -m codeexec.runner`: the runner on RUNNER_HOST:RUNNER_PORT, its reaper on a timer.

It reads the same settings as the service (SANDBOX_ROOT, the limits, LEASE_TTL_SECONDS,
IDLE_TIMEOUT_SECONDS, REAP_INTERVAL_SECONDS) and RUNNER_KEY, the key callers must send.
With RUNNER_HOOK_PORT set (in a MicroVM), it also answers AWS's lifecycle hooks there:
the image build's /ready, and each VM's /run, which hands it its key (hooks.py). It is
served as the service is (codeexec.serving), and imports neither the API nor the
embedded server.
"""

from __future__ import annotations

import logging
import os

from .. import serving
from ..settings import Settings
from ..telemetry import logs
from .app import create_runner_app
from .build import build_runner
from .container import prepare


def main() -> None:
    settings = Settings()
    logs.configure(settings.log_format, settings.log_level)
    prepare()  # in a container: what its engine masked or made read-only, before any sandbox
    runner = build_runner(settings)
    if runner.key is None:
        # Fail closed: every call but /health answers 401 until a key is configured.
        logging.getLogger("codeexec.runner").warning("RUNNER_KEY is not set: every call will be refused")
    host = os.environ.get("RUNNER_HOST", "127.0.0.1")
    port = int(os.environ.get("RUNNER_PORT", "8080"))
    app, metrics_port = create_runner_app(runner), settings.runner_metrics_port
    servers = serving.with_metrics(app, runner.telemetry, host, port, metrics_port)
    hook_port = os.environ.get("RUNNER_HOOK_PORT")
    if hook_port:  # in a MicroVM: AWS's lifecycle hooks; its key arrives with the run hook
        from .hooks import create_hook_app

        runner_server = servers[0]  # the image build's /ready answers once it serves
        hook_app = create_hook_app(runner, ready=lambda: runner_server.started)
        servers.append(serving.server(hook_app, host, int(hook_port)))
    print(f"Sandbox runner on http://{host}:{port} (root: {settings.sandbox_root})", flush=True)
    serving.serve(*servers)


if __name__ == "__main__":
    main()
