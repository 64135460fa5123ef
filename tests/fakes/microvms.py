"""A local fake of the AWS Lambda MicroVMs control plane (moto has none), for the real
botocore `lambda-microvms` client, and of each VM's HTTPS endpoint.

Each VM is a real runner (`codeexec.runner`, the `local` backend) on loopback, booted the
way AWS documents: its image's `/ready` hook answered (the build), then its `/run` hook
called with RunMicrovm's `runHookPayload` as the request body, at AWS's paths
(`hook_body="envelope"` sends it as AWS's samples read it instead, in `{"microvmId",
"runHookPayload"}`). Its endpoint is a proxy served over TLS (`ca` signs its certificate)
that, as AWS's does, admits only requests with a token minted for that VM and port
(X-aws-proxy-auth), counts them as the traffic the idle policy watches, resumes a
suspended VM, and streams bodies both ways. RunMicrovm answers the endpoint as a bare
host and path (`endpoint_scheme=True`: with `https://`), as AWS leaves it unsaid.

Every control-plane request it receives, and every reply and error before it is sent, is
checked against botocore's model (models.py); one that breaks it is answered 500 and kept in `violations`.

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
import trustme
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from codeexec.runner.app import create_runner_app
from codeexec.runner.build import build_runner
from codeexec.runner.hooks import HOOKS, create_hook_app
from codeexec.settings import Settings

from ..serving import serving
from .models import ModelViolation, check_error, check_reply, check_request

API = "/2025-09-09"
PORT = 8080
_SERVICE = "lambda-microvms"
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
    def __init__(self, root: Path, settings: Settings, hook_body: str = "payload", endpoint_scheme: bool = False):
        self.root = root
        self.settings = settings  # the limits and clocks of every VM's runner
        self.hook_body, self.endpoint_scheme = hook_body, endpoint_scheme
        self.ca = trustme.CA()
        self.endpoints_url = ""  # https://host:port of the VMs' endpoints
        self.hooks: list[tuple[str, bytes]] = []  # every hook called: (its path, its body)
        self.violations: list[str] = []
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
        if refused := self._refused("RunMicrovm", body):
            return refused
        self.launches.append(body)
        if self.throttled > 0:
            self.throttled -= 1
            return self._error("RunMicrovm", "ThrottlingException", "Rate exceeded", str(self.retry_after))
        vm_id = self.next_ids.pop(0) if self.next_ids else f"mvm-{secrets.token_hex(8)}"
        vm = Vm(vm_id, body, self.now(), last_traffic=self.now())
        with self._lock:
            self.vms[vm_id] = vm
        threading.Thread(target=self._boot, args=(vm, self.die_on_boot), daemon=True).start()
        self.die_on_boot = False
        return self._reply("RunMicrovm", self.record(vm))

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
        hook_url = vm.stack.enter_context(serving(create_hook_app(runner, ready=lambda: True)))
        # The image's build: AWS snapshots the VM once /ready answers (here, every VM's own).
        answers = [self._hook(f"{hook_url}{HOOKS}/ready", b"")]
        payload = vm.request.get("runHookPayload", "")
        body = payload if self.hook_body == "payload" else json.dumps({"microvmId": vm.id, "runHookPayload": payload})
        answers.append(self._hook(f"{hook_url}{HOOKS}/run", body.encode()))
        with self._lock:
            if vm.state == "PENDING":
                vm.state = "RUNNING" if answers == [200, 200] else "TERMINATED"

    def _hook(self, url: str, body: bytes) -> int:
        self.hooks.append((httpx.URL(url).path, body))
        return httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=30).status_code

    async def get_microvm(self, request: Request) -> Response:
        self.tick()
        vm = self.vms.get(request.path_params["vm"])
        return self._reply("GetMicrovm", self.record(vm)) if vm else self._not_found("GetMicrovm")

    async def terminate_microvm(self, request: Request) -> Response:
        vm = self.vms.get(request.path_params["vm"])
        if vm is None:
            return self._not_found("TerminateMicrovm")
        with self._lock:
            self._end(vm, "TerminatedByUser")
        return self._reply("TerminateMicrovm", {})

    async def list_microvms(self, request: Request) -> Response:
        self.tick()
        image = request.query_params.get("imageIdentifier")
        items = [self._item(vm) for vm in self.vms.values() if image is None or vm.request["imageIdentifier"] == image]
        start, size = int(request.query_params.get("nextToken", 0)), int(request.query_params.get("maxResults", 50))
        page: dict[str, Any] = {"items": items[start : start + size]}
        if start + size < len(items):
            page["nextToken"] = str(start + size)
        return self._reply("ListMicrovms", page)

    async def auth_token(self, request: Request) -> Response:
        vm = self.vms.get(request.path_params["vm"])
        if vm is None or vm.state == "TERMINATED":
            return self._not_found("CreateMicrovmAuthToken")
        body = json.loads(await request.body())
        if refused := self._refused("CreateMicrovmAuthToken", body):
            return refused
        if [p.get("port") for p in body["allowedPorts"]] != [PORT] or not 1 <= body["expirationInMinutes"] <= 60:
            message = "tokens here are for port 8080, for at most 60 minutes"
            return self._error("CreateMicrovmAuthToken", "ValidationException", message)
        token = secrets.token_urlsafe(32)
        vm.tokens[token] = self.now() + 60 * body["expirationInMinutes"]
        return self._reply("CreateMicrovmAuthToken", {"authToken": {"X-aws-proxy-auth": token}})

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

    def record(self, vm: Vm) -> dict[str, Any]:
        endpoint = f"{self.endpoints_url}/endpoints/{vm.id}"
        record = {
            **self._item(vm),
            "endpoint": endpoint if self.endpoint_scheme else endpoint.removeprefix("https://"),
            "maximumDurationInSeconds": vm.request["maximumDurationInSeconds"],
        }
        for member in ("idlePolicy", "egressNetworkConnectors", "ingressNetworkConnectors"):
            if member in vm.request:
                record[member] = vm.request[member]
        if vm.state_reason:
            record["stateReason"] = vm.state_reason
        return record

    def _refused(self, operation: str, body: dict[str, Any]) -> Response | None:
        """A 500 for a request body the model does not allow (botocore would never send it)."""
        try:
            check_request(_SERVICE, operation, body)
        except ModelViolation as exc:
            self.violations.append(str(exc))
            return JSONResponse({"message": "a request the model does not allow"}, 500)
        return None

    def _reply(self, operation: str, body: dict[str, Any]) -> Response:
        try:
            check_reply(_SERVICE, operation, body)
        except ModelViolation as exc:
            self.violations.append(str(exc))
            return JSONResponse({"message": "the fake broke the model"}, 500)
        return JSONResponse(body)

    def _error(self, operation: str, code: str, message: str, retry_after: str | None = None) -> Response:
        status = {"ThrottlingException": 429, "ValidationException": 400, "ResourceNotFoundException": 404}[code]
        body = {"message": message}
        try:
            check_error(_SERVICE, operation, code, status, body)
        except ModelViolation as exc:
            self.violations.append(str(exc))
            return JSONResponse({"message": "the fake broke the model"}, 500)
        headers = {"x-amzn-ErrorType": code} | ({"Retry-After": retry_after} if retry_after else {})
        return JSONResponse(body, status, headers)

    def _not_found(self, operation: str) -> Response:
        return self._error(operation, "ResourceNotFoundException", "MicroVM not found")

    def control_plane(self) -> Starlette:
        return Starlette(
            routes=[
                Route(f"{API}/microvms", self.run_microvm, methods=["POST"]),
                Route(f"{API}/microvms", self.list_microvms, methods=["GET"]),
                Route(f"{API}/microvms/{{vm}}", self.get_microvm, methods=["GET"]),
                Route(f"{API}/microvms/{{vm}}", self.terminate_microvm, methods=["DELETE"]),
                Route(f"{API}/microvms/{{vm}}/auth-token", self.auth_token, methods=["POST"]),
            ]
        )

    def endpoints(self) -> Starlette:
        methods = ["GET", "POST", "PUT", "DELETE"]
        return Starlette(routes=[Route("/endpoints/{vm}/{path:path}", self.endpoint, methods=methods)])


@contextlib.contextmanager
def running_fake(root: Path, settings: Settings, **options: Any) -> Iterator[FakeMicrovms]:
    """The fake's control plane on loopback, its endpoints over TLS: the caller trusts
    `fake.ca` (tests set SSL_CERT_FILE to its certificate)."""
    fake = FakeMicrovms(root, settings, **options)
    certfile = root.parent / "endpoint.pem"
    root.parent.mkdir(parents=True, exist_ok=True)
    fake.ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(certfile))
    try:
        with serving(fake.control_plane()) as url, serving(fake.endpoints(), certfile=str(certfile)) as endpoints:
            fake.base_url, fake.endpoints_url = url, endpoints
            yield fake
    finally:
        fake.close()
    if fake.violations:
        raise ModelViolation("; ".join(fake.violations))
