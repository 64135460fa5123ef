"""GET /health: whether the service answers, what it accepts and which languages it runs.
It needs no credentials, so a deployment that accepts none can still say why. A backend
that cannot serve now (no runner of the fleet answers) makes it a 503, and says which of
its parts answer."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..dependencies import ServiceDep

HEALTH_PATH = "/health"
# Where the reference server answers it, under the clients' base URL.
V1_HEALTH_PATH = "/v1/health"

# How soon a caller (a load balancer, Compose's health check) should ask again when the
# backend cannot serve: runners are asked every second.
RETRY_AFTER_SECONDS = 2

router = APIRouter()


# async: it reads state and waits on nothing, so it needs no thread, and a pool full of
# long calls cannot delay it.
@router.get(HEALTH_PATH)
@router.get(V1_HEALTH_PATH)
async def health(service: ServiceDep) -> JSONResponse:
    sandboxes = service.sessions.sandboxes
    serving, parts = sandboxes.health()
    answer: dict[str, Any] = {
        "status": "ok" if serving else "unavailable",
        "auth": service.auth.status(),
        "auth_modes": service.auth.modes,
        "backend": service.settings.sandbox_backend,
        **parts,
        "languages": sorted(sandboxes.languages) if serving else [],
        "runs_at_once": service.admission.runs,
    }
    if serving:
        return JSONResponse(answer)
    return JSONResponse(answer, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
