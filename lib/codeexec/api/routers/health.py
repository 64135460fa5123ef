"""GET /health: whether the service answers, what it accepts and which languages it runs.
It needs no credentials, so a deployment that accepts none can still say why."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..dependencies import ServiceDep

HEALTH_PATH = "/health"
# Where the reference server answers it, under the clients' base URL.
V1_HEALTH_PATH = "/v1/health"

router = APIRouter()


# async: it reads state and waits on nothing, so it needs no thread, and a pool full of
# long calls cannot delay it.
@router.get(HEALTH_PATH)
@router.get(V1_HEALTH_PATH)
async def health(service: ServiceDep) -> dict[str, Any]:
    return {
        "status": "ok",
        "auth": service.auth.status(),
        "backend": service.settings.sandbox_backend,
        "languages": sorted(service.sessions.sandboxes.languages),
        "runs_at_once": service.admission.runs,
    }
