"""The embedded server: the app under uvicorn on loopback, with the `local` backend, and
the reaper on a timer in-process (the service's own: api/service.py).

    python -m codeexec.server        (what `make serve` runs)
"""

from __future__ import annotations

import os
import secrets
import sys

from pydantic import SecretStr, ValidationError

from . import serving
from .api.app import create_app
from .api.service import Service
from .settings import Settings
from .telemetry import logs


def main() -> None:
    try:
        settings = Settings()
    except ValidationError as exc:  # a setting the service cannot start with: say which, not a traceback
        sys.exit("codeexec: " + "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()))
    logs.configure(settings.log_format, settings.log_level)
    if settings.code_exec_api_key is None:
        # A new user can call the service at once; a deployment sets its own key.
        key = secrets.token_urlsafe(24)
        print(f"CODE_EXEC_API_KEY was not set; this run's key is: {key}", flush=True)
        settings = Settings(code_exec_api_key=SecretStr(key))
    host = os.environ.get("HOST", "127.0.0.1")
    port = int(os.environ.get("PORT", "8000"))
    service = Service(settings)
    app = create_app(service)  # its lifespan starts the service, and closes it as uvicorn stops
    print(f"Code interpreter on http://{host}:{port}/v1 (backend: {settings.sandbox_backend})", flush=True)
    serving.serve(*serving.with_metrics(app, service.telemetry, host, port, settings.metrics_port))


if __name__ == "__main__":
    main()
