"""The operator's console: its page, and the one call its page makes (api/console.py), behind
CODE_EXEC_ADMIN_KEY (the gate checks it: gate.py).

The page is HTML, a script and a style sheet from the package, nothing from another host, sent
with a Content-Security-Policy that lets it load only those and call only this service; it
keeps no cookie (the key travels in a header its script sets, so no other site can make a
browser call the API with it). The API takes no parameter and no body, and answers nothing
it was not asked for.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from ...errors import BadRequest
from .. import console
from ..dependencies import ServiceDep
from ..gate import ADMIN_API_PATH, ADMIN_PATH

PAGE = files("codeexec.api") / "console_page"
# The page's files, by the name it asks for them by, and their types: nothing else is served.
ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(include_in_schema=False)


@router.get(ADMIN_PATH)
async def page() -> Response:
    return Response((PAGE / "index.html").read_bytes(), media_type="text/html", headers=SECURITY_HEADERS)


@router.get(ADMIN_PATH + "/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        return JSONResponse({"error": "Not found", "details": "no such file of the console"}, status_code=404)
    return Response((PAGE / name).read_bytes(), media_type=ASSETS[name], headers=SECURITY_HEADERS)


@router.get(ADMIN_API_PATH + "overview")
async def overview(request: Request, service: ServiceDep) -> JSONResponse:
    if request.query_params:
        raise BadRequest("the console's API takes no parameter")
    made: dict[str, Any] = await run_in_threadpool(console.overview, service)  # it asks every runner
    return JSONResponse(made, headers=SECURITY_HEADERS)
