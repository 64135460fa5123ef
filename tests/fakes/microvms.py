"""A local fake of the AWS Lambda MicroVMs control plane (moto has none), for the real
botocore `lambda-microvms` client, and of each VM's HTTPS endpoint.

Each VM is a real runner (`codeexec.runner`, the `local` backend) on loopback, booted the
way AWS boots one: its run hook is called with the RunMicrovm payload. Its endpoint is a
proxy in this fake that, as AWS's does, admits only requests with a token minted for
that VM and port (X-aws-proxy-auth), counts them as the traffic the idle policy watches,
resumes a suspended VM, and streams bodies both ways.

What tests steer: `throttled` (answer that many RunMicrovm with 429 and Retry-After),
`die_on_boot` (the next VM stops before its runner answers), `next_ids` (the VM ids to
hand out), and `advance(seconds)`, the fake's clock for idle policies and durations.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from codeexec.runner.app import create_runner_app
from codeexec.runner.build import build_runner
from codeexec.runner.hooks import create_hook_app
from codeexec.settings import Settings

from ..serving import serving

API = "/2025-09-09"
PORT = 8080
_HOP_HEADERS = {"host", "connection", "transfer-encoding", "x-aws-proxy-auth", "x-aws-proxy-port", "keep-alive"}


@dataclass
class Vm:
    id: str
    request: dict[str, Any]
    started_at: float
    state: str = "PENDING"
    state_reason: str | None = None
    runner_url: str = ""
    last_traffic: float = 0.0
    suspended_at: float = 0.0
    tokens: dict[str, float] = field(default_factory=dict)  # token: expires at
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


class FakeMicrovms:
    def __init__(self, root: Path, settings: Settings) -> None:
        self.root = root
        self.settings = settings  # the limits and clocks of every VM's runner
        self.vms: dict[str, Vm] = {}
        self.launches: list[dict[str, Any]] = []  # every RunMicrovm request, as received
        self.throttled = 0
        self.retry_after = 3
        self.die_on_boot = False
        self.next_ids: list[str] = []
        self.offset = 0.0
        self.base_url = ""
        self._lock = threading.RLock()

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        self.tick()

    def tick(self) -> None:
        """What AWS does on its own: suspend idle VMs, end suspended and expired ones."""
        now = self.now()
        with self._lock:
            for vm in list(self.vms.values()):
                policy = vm.request.get("idlePolicy") or {}
                if vm.state == "RUNNING" and now - vm.last_traffic >= policy.get("maxIdleDurationSeconds", 1e12):
                    vm.state, vm.suspended_at = "SUSPENDED", now
                if vm.state == "SUSPENDED" and now - vm.suspended_at >= policy.get("suspendedDurationSeconds", 1e12):
                    self._end(vm, "SuspendedTooLong")
                if vm.state not in ("TERMINATED",) and now - vm.started_at >= vm.request["maximumDurationInSeconds"]:
                    self._end(vm, "MaximumDurationReached")

    def running(self) -> list[str]:
        return [vm.id for vm in self.vms.values() if vm.state != "TERMINATED"]

    def close(self) -> None:
        with self._lock:
            for vm in self.vms.values():
                self._end(vm, "FakeClosed")

    # -- the control plane --------------------------------------------------------------

    async def run_microvm(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.launches.append(body)
        if self.throttled > 0:
            self.throttled -= 1
            return _error(429, "ThrottlingException", "Rate exceeded", {"Retry-After": str(self.retry_after)})
        vm_id = self.next_ids.pop(0) if self.next_ids else f"mvm-{secrets.token_hex(8)}"
        vm = Vm(vm_id, body, self.now(), last_traffic=self.now())
        with self._lock:
            self.vms[vm_id] = vm
        threading.Thread(target=self._boot, args=(vm, self.die_on_boot), daemon=True).start()
        self.die_on_boot = False
        return JSONResponse(self._record(vm))

    def _boot(self, vm: Vm, dies: bool) -> None:
        time.sleep(0.2)  # PENDING for a moment, as a real VM is
        if dies:
            with self._lock:
                vm.state, vm.state_reason = "TERMINATED", "Runtime.ExitError"
            return
        settings = self.settings.model_copy(update={"sandbox_root": self.root / vm.id, "runner_key": None})
        (self.root / vm.id).mkdir(parents=True)
        (self.root / vm.id).chmod(0o711)
        runner = build_runner(settings)  # no key: it refuses everything until the hook
        vm.runner_url = vm.stack.enter_context(serving(create_runner_app(runner)))
        hook_url = vm.stack.enter_context(serving(create_hook_app(runner)))
        envelope = {"microvmId": vm.id, "runHookPayload": vm.request.get("runHookPayload", "")}
        answer = httpx.post(f"{hook_url}/run", json=envelope, timeout=30)
        with self._lock:
            if vm.state == "PENDING":
                vm.state = "RUNNING" if answer.status_code == 200 else "TERMINATED"

    async def get_microvm(self, request: Request) -> Response:
        self.tick()
        vm = self.vms.get(request.path_params["vm"])
        return JSONResponse(self._record(vm)) if vm else _not_found()

    async def terminate_microvm(self, request: Request) -> Response:
        vm = self.vms.get(request.path_params["vm"])
        if vm is None:
            return _not_found()
        with self._lock:
            self._end(vm, "TerminatedByUser")
        return JSONResponse({})

    async def list_microvms(self, request: Request) -> Response:
        self.tick()
        image = request.query_params.get("imageIdentifier")
        items = [self._item(vm) for vm in self.vms.values() if image is None or vm.request["imageIdentifier"] == image]
        start, size = int(request.query_params.get("nextToken", 0)), int(request.query_params.get("maxResults", 50))
        page: dict[str, Any] = {"items": items[start : start + size]}
        if start + size < len(items):
            page["nextToken"] = str(start + size)
        return JSONResponse(page)

    async def auth_token(self, request: Request) -> Response:
        vm = self.vms.get(request.path_params["vm"])
        if vm is None or vm.state == "TERMINATED":
            return _not_found()
        body = json.loads(await request.body())
        if [p.get("port") for p in body["allowedPorts"]] != [PORT] or not 1 <= body["expirationInMinutes"] <= 60:
            return _error(400, "ValidationException", "tokens here are for port 8080, for at most 60 minutes")
        token = secrets.token_urlsafe(32)
        vm.tokens[token] = self.now() + 60 * body["expirationInMinutes"]
        return JSONResponse({"authToken": {"X-aws-proxy-auth": token}})

    # -- a VM's endpoint ----------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        self.tick()
        vm = self.vms.get(request.path_params["vm"])
        token = request.headers.get("x-aws-proxy-auth", "")
        if vm is None or vm.tokens.get(token, 0) < self.now() or request.headers.get("x-aws-proxy-port") != str(PORT):
            return JSONResponse({"message": "Forbidden"}, 403)
        if vm.state == "SUSPENDED" and vm.request.get("idlePolicy", {}).get("autoResumeEnabled"):
            vm.state = "RUNNING"
        if vm.state != "RUNNING":
            return JSONResponse({"message": "the MicroVM is not running"}, 502)
        vm.last_traffic = self.now()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        client = httpx.AsyncClient(timeout=None)
        url = f"{vm.runner_url}/{request.path_params['path']}"
        upstream = client.build_request(
            request.method, url, params=request.query_params, headers=headers, content=request.stream()
        )
        answer = await client.send(upstream, stream=True)

        async def done() -> None:
            vm.last_traffic = self.now()
            await answer.aclose()
            await client.aclose()

        out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS}
        return StreamingResponse(answer.aiter_raw(), answer.status_code, out, background=BackgroundTask(done))

    # -- records ------------------------------------------------------------------------

    def _end(self, vm: Vm, reason: str) -> None:
        if vm.state != "TERMINATED":
            vm.state, vm.state_reason = "TERMINATED", reason
        threading.Thread(target=vm.stack.close, daemon=True).start()  # the VM's servers stop

    def _item(self, vm: Vm) -> dict[str, Any]:
        image, started = vm.request["imageIdentifier"], vm.started_at
        return {"microvmId": vm.id, "state": vm.state, "imageArn": image, "imageVersion": "1", "startedAt": started}

    def _record(self, vm: Vm) -> dict[str, Any]:
        record = {
            **self._item(vm),
            "endpoint": f"{self.base_url}/endpoints/{vm.id}",
            "maximumDurationInSeconds": vm.request["maximumDurationInSeconds"],
            "idlePolicy": vm.request.get("idlePolicy"),
            "egressNetworkConnectors": vm.request.get("egressNetworkConnectors", []),
        }
        if vm.state_reason:
            record["stateReason"] = vm.state_reason
        return record

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(f"{API}/microvms", self.run_microvm, methods=["POST"]),
                Route(f"{API}/microvms", self.list_microvms, methods=["GET"]),
                Route(f"{API}/microvms/{{vm}}", self.get_microvm, methods=["GET"]),
                Route(f"{API}/microvms/{{vm}}", self.terminate_microvm, methods=["DELETE"]),
                Route(f"{API}/microvms/{{vm}}/auth-token", self.auth_token, methods=["POST"]),
                Route("/endpoints/{vm}/{path:path}", self.endpoint, methods=["GET", "POST", "PUT", "DELETE"]),
            ]
        )


@contextlib.contextmanager
def running_fake(root: Path, settings: Settings) -> Iterator[FakeMicrovms]:
    fake = FakeMicrovms(root, settings)
    try:
        with serving(fake.app()) as url:
            fake.base_url = url
            yield fake
    finally:
        fake.close()


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"message": message}, status, {"x-amzn-ErrorType": code, **(headers or {})})


def _not_found() -> Response:
    return _error(404, "ResourceNotFoundException", "MicroVM not found")
