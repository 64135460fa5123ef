"""The `microvm` backend: a session is an AWS Lambda MicroVM running the runner.

Each VM runs `python -m codeexec.runner` from the project's image (`Dockerfile`): the
`local` backend with every toolchain, holding this one session. The service talks to it
through the VM's HTTPS endpoint, each request carrying a token minted by
CreateMicrovmAuthToken (X-aws-proxy-auth, for the runner's port only) and the runner key.

Where a session's facts live, and why there:

- The runner's key reaches the VM once, in RunMicrovm's run-hook payload (a field AWS
  treats as secret; the image, one snapshot for every VM, holds none). Once the runner
  takes it, the session is created through the runner with its owner, whether it is
  shared or read-only, and its id: the runner keeps them in its own state, outside the
  sandbox, where user code in the VM can neither read nor change them. Opening a session
  asks the runner for its lease and admits the caller here.
- The session id is the VM id, mapped without a table (`vm_ids.py`).
- The TTL is the VM's maximum duration and the idle limit its idle policy: AWS suspends
  a VM nobody called for that long and ends it when its time is up. The reaper reads
  the listing alone (it never calls a VM: a call would count as traffic and keep it
  awake) and ends what AWS suspended or what outlived its TTL. Its leases name no owner:
  the listing does not carry one, and the reaper needs none.
- Holds and uses are the runner's, as with the `runner` backend.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...errors import BackendUnavailable, SessionNotFound
from ...languages import LANGUAGES
from ..port import Lease, OwnerTag
from ..runner import RunnerClient, RunnerConfig, RunnerSandbox, RunnerSessions
from . import vm_ids
from .api import TOKEN_MINUTES, MicrovmApi

MAX_SECONDS = 28_800  # RunMicrovm's ceiling for maximumDurationInSeconds
RUNNER_PORT = 8080  # where the image's runner listens: the endpoint's default port
# How long AWS keeps a suspended VM before it ends it itself; the reaper ends one sooner.
SUSPENDED_SECONDS = 600
_ENDED = ("TERMINATING", "TERMINATED")
_ASLEEP = ("SUSPENDING", "SUSPENDED")
_CLIENTS_KEPT = 256  # VMs whose connections and token this process keeps


@dataclass(frozen=True)
class MicrovmConfig:
    image: str  # the MicroVM image's ARN
    runner_key: str
    lease_ttl_seconds: int
    idle_timeout_seconds: int
    run_timeout_seconds: float
    egress_connector: str | None  # the VPC egress connector that closes the VMs' egress
    ingress_connector: str | None
    endpoint_url: str | None  # another control plane, such as the tests' fake
    boot_seconds: float = 60.0


def https(endpoint: str) -> str:
    """The VM's endpoint as a URL. AWS documents an HTTPS endpoint without saying whether
    RunMicrovm and GetMicrovm answer it with its scheme: a bare host gets `https://`."""
    return endpoint if "://" in endpoint else f"https://{endpoint}"


class _Vm:
    """One VM's runner, with a token minted for it and renewed before it expires."""

    def __init__(self, vm_id: str, endpoint: str, backend: MicrovmSandboxes) -> None:
        self._vm_id, self._backend = vm_id, backend
        self._token, self._renew_at = "", 0.0
        self._lock = threading.Lock()
        client = RunnerClient(endpoint, backend.config.runner_key, backend.runner.call_seconds, headers=self._auth)
        self.sessions = RunnerSessions(client, backend.runner.call_seconds)

    def _auth(self) -> dict[str, str]:
        with self._lock:
            if time.monotonic() >= self._renew_at:
                self._token = self._backend.api.auth_token(self._vm_id, RUNNER_PORT)
                self._renew_at = time.monotonic() + (TOKEN_MINUTES - 5) * 60
            return {"X-aws-proxy-auth": self._token, "X-aws-proxy-port": str(RUNNER_PORT)}


class MicrovmSandboxes:
    languages = frozenset(LANGUAGES)  # the image carries every toolchain
    named_sessions = False  # a session id is its VM's

    def __init__(self, config: MicrovmConfig, api: MicrovmApi | None = None) -> None:
        self.config = config
        self.api = api or MicrovmApi(config.endpoint_url)
        self.ttl_seconds = min(config.lease_ttl_seconds, MAX_SECONDS)
        self.runner = RunnerConfig("", config.runner_key, config.run_timeout_seconds)
        self._vms: OrderedDict[str, _Vm] = OrderedDict()
        self._vms_lock = threading.Lock()

    @contextlib.contextmanager
    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> Iterator[RunnerSandbox]:
        if session_id is not None:
            raise ValueError("a MicroVM session's id is its VM's")
        started = self.api.run(**self._launch())
        vm_id = started["microvmId"]
        try:
            session = vm_ids.session_of(vm_id)
        except vm_ids.Unmappable as exc:
            self.api.terminate(vm_id)
            raise BackendUnavailable(str(exc)) from exc
        vm = self._vm(vm_id, started["endpoint"])
        self._await_boot(vm_id, vm)
        with contextlib.ExitStack() as stack:
            try:
                sandbox = stack.enter_context(vm.sessions.create(owner, shared, read_only, session))
            except BaseException:
                self.api.terminate(vm_id)  # a VM without its session would idle to its TTL
                raise
            yield sandbox

    @contextlib.contextmanager
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> Iterator[RunnerSandbox]:
        vm_id, vm = self._live(session_id)
        try:
            with vm.sessions.open(session_id, admit) as sandbox:
                yield sandbox
        except BackendUnavailable:
            # A VM AWS ended (its TTL, an idle one reaped) no longer answers: its session is gone.
            if self._state(vm_id)[0] in _ENDED:
                raise SessionNotFound() from None
            raise

    def end(self, session_id: str) -> None:
        with contextlib.suppress(vm_ids.Unmappable):
            self.api.terminate(vm_ids.vm_of(session_id))

    def cancel(self, run_key: str) -> None:
        """A no-op: a run key names no session, so no VM to ask. A run stops at its time limit."""

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """Never calls the VM: a VM that AWS suspended has had no traffic for the idle
        limit, so no call is using it; one past its TTL is ended by AWS at that moment anyway."""
        try:
            vm_id = vm_ids.vm_of(session_id)
            vm = self.api.get(vm_id)
        except (vm_ids.Unmappable, SessionNotFound):
            return False
        lease = self._lease(vm)
        if lease is None or not still_due(lease):
            return False
        self.api.terminate(vm_id)
        return True

    def leases(self) -> Iterator[Lease]:
        for item in self.api.microvms(self.config.image):
            lease = self._lease(item)
            if lease is not None:
                yield lease

    # -- the VMs ----------------------------------------------------------------------------

    def _launch(self) -> dict[str, Any]:
        request: dict[str, Any] = {
            "imageIdentifier": self.config.image,
            "maximumDurationInSeconds": self.ttl_seconds,
            "idlePolicy": {
                "maxIdleDurationSeconds": max(60, self.config.idle_timeout_seconds),
                "suspendedDurationSeconds": SUSPENDED_SECONDS,
                "autoResumeEnabled": True,
            },
            "runHookPayload": json.dumps({"runner_key": self.config.runner_key}),
            "clientToken": uuid.uuid4().hex,
        }
        if self.config.egress_connector:
            request["egressNetworkConnectors"] = [self.config.egress_connector]
        if self.config.ingress_connector:
            request["ingressNetworkConnectors"] = [self.config.ingress_connector]
        return request

    def _await_boot(self, vm_id: str, vm: _Vm) -> None:
        """Until the runner answers with the key its run hook gave it; a VM that stops on
        the way, or takes too long, is ended and the caller told to retry."""
        deadline = time.monotonic() + self.config.boot_seconds
        while True:
            with contextlib.suppress(BackendUnavailable):
                list(vm.sessions.leases())  # a call only its key opens (nothing to list yet)
                return
            state, reason = self._state(vm_id)
            if state in _ENDED:
                self.api.terminate(vm_id)
                raise BackendUnavailable(f"the MicroVM stopped while it booted ({reason})", retry_after=1)
            if time.monotonic() > deadline:
                self.api.terminate(vm_id)
                raise BackendUnavailable("the MicroVM did not boot in time", retry_after=5)
            time.sleep(0.1)

    def _state(self, vm_id: str) -> tuple[str, str]:
        try:
            vm = self.api.get(vm_id)
        except SessionNotFound:
            return "TERMINATED", "not found"
        return str(vm["state"]), str(vm.get("stateReason") or "no reason given")

    def _live(self, session_id: str) -> tuple[str, _Vm]:
        try:
            vm_id = vm_ids.vm_of(session_id)
        except vm_ids.Unmappable:
            raise SessionNotFound() from None
        with self._vms_lock:
            known = self._vms.get(vm_id)
        if known is not None:
            return vm_id, known
        vm = self.api.get(vm_id)
        if vm["state"] in _ENDED:
            raise SessionNotFound()
        return vm_id, self._vm(vm_id, vm["endpoint"])

    def _vm(self, vm_id: str, endpoint: str) -> _Vm:
        with self._vms_lock:
            vm = self._vms.get(vm_id)
            if vm is None:
                vm = self._vms[vm_id] = _Vm(vm_id, https(endpoint), self)
                while len(self._vms) > _CLIENTS_KEPT:
                    self._vms.popitem(last=False)[1].sessions.client.close()
            self._vms.move_to_end(vm_id)
            return vm

    def _lease(self, item: dict[str, Any]) -> Lease | None:
        if item["state"] in _ENDED:
            return None
        try:
            session_id = vm_ids.session_of(item["microvmId"])
        except vm_ids.Unmappable:
            return None
        started = item["startedAt"].timestamp()
        # A VM AWS suspended was idle for the idle limit. One awake is AWS's to watch (its
        # idle policy is the idle limit): never idle-due here, whatever the reaper's clock.
        touched = started if item["state"] in _ASLEEP else math.inf
        return Lease(session_id, OwnerTag("", ""), False, False, started, self.ttl_seconds, touched)
