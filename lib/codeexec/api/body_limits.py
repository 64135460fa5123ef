"""How large a request's body may be: each route declares its own limit (`@body_limit`, under
its path), and the gate (gate.py) holds a body to it before reading a byte of it.

The gate runs ahead of the router, so it finds the route a request is for itself, by the
router's own match over the same routes (`RouteLimits`). A route that declares no limit, and
a path that no route serves, takes JSON_BODY's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from ..errors import TooLarge
from .dependencies import Service

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
# Room for the multipart framing around an upload's file.
FRAMING_BYTES = 65_536


@dataclass(frozen=True)
class BodyLimit:
    """A limit, from the service's settings, and what a body over it is told."""

    bytes_of: Callable[[Service], int]
    files: bool = False  # it carries files: a body over it is told what a deployment on AWS carries at all

    def too_large(self, service: Service) -> TooLarge:
        details = f"the request is larger than its {self.bytes_of(service)} byte limit"
        gateway = service.settings.gateway_request_bytes
        if gateway and self.files:  # on AWS: what API Gateway and Lambda carry
            details += (
                f"; a request to this deployment carries at most {gateway} bytes (a file counts 4/3 of"
                " its size there), so a file that large cannot be uploaded to it at all"
            )
        return TooLarge(details)


JSON_BODY = BodyLimit(lambda service: service.settings.max_request_bytes)
UPLOAD_BODY = BodyLimit(lambda service: service.sessions.limits.max_upload_bytes + FRAMING_BYTES, files=True)

_declared: dict[Callable[..., Any], BodyLimit] = {}


def body_limit(limit: BodyLimit) -> Callable[[Endpoint], Endpoint]:
    """Declare the body limit of the routes an endpoint serves."""

    def declare(endpoint: Endpoint) -> Endpoint:
        _declared[endpoint] = limit
        return endpoint

    return declare


class RouteLimits:
    """The body limit of the route a request is for, found before the request is routed."""

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        # All of them, in the router's order: the route found is the one that will serve it.
        served = [route for route in routes if isinstance(route, Route)]
        self._routes = [(route, _declared.get(route.endpoint, JSON_BODY)) for route in served]

    def of(self, scope: Scope) -> BodyLimit:
        for route, limit in self._routes:
            if route.matches(scope)[0] is Match.FULL:
                return limit
        return JSON_BODY
