"""The `microvm` backend: a session is an AWS Lambda MicroVM running the runner.

Each VM runs `python -m codeexec.runner` from the project's image (`Dockerfile`): the
`local` backend with every toolchain, holding this one session. The service talks to it
through the VM's HTTPS endpoint, each request carrying a token minted by
CreateMicrovmAuthToken (X-aws-proxy-auth, for the runner's port only) and the runner key.

Where a session's facts live, and why there:

- The runner's key reaches the VM once, in RunMicrovm's run-hook payload (a field AWS
  treats as secret; the image, one snapshot for every VM, holds none). The VM's first
  request creates its session, named after the VM, with its owner and whether it is
  shared or read-only: the runner keeps them in its own state, outside the sandbox, where
  user code in the VM can neither read nor change them. The caller's access travels with
  every request and the runner admits it.
- The session id is the VM id, mapped without a table (`vm_ids.py`).
- The TTL is the VM's maximum duration and the idle limit its idle policy: AWS suspends
  a VM nobody called for that long and ends it when its time is up. The reaper reads
  the listing alone (it never calls a VM: a call would count as traffic and keep it
  awake) and ends what AWS suspended or what outlived its TTL. Its leases name no owner:
  the listing does not carry one, and the reaper needs none.
- Every operation is one request to the session's VM, whose runner answers it as the
  `runner` backend's does. Inputs from other sessions are other VMs': a run reads them
  once per origin VM and streams them into its own request.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

import httpx

from ...errors import BackendUnavailable, SessionNotFound
from ...languages import LANGUAGES
from ..port import (
    Access,
    Carried,
    FileInfo,
    Input,
    Lease,
    Opened,
    OwnerTag,
    Placement,
    Ran,
    Run,
    RunSlot,
    Sandboxes,
    SendTo,
)
from ..remote import RunnerClient, RunnerPort, call_seconds
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
        # A VM AWS suspended resumes on its next request, which may take seconds: a VM's
        # calls wait as long as its longest answer may take.
        timeout = httpx.Timeout(call_seconds(backend.config.run_timeout_seconds), connect=10.0)
        client = RunnerClient(endpoint, backend.config.runner_key, timeout, headers=self._auth)
        self.port = RunnerPort(client)

    def _auth(self) -> dict[str, str]:
        with self._lock:
            if time.monotonic() >= self._renew_at:
                self._token = self._backend.api.auth_token(self._vm_id, RUNNER_PORT)
                self._renew_at = time.monotonic() + (TOKEN_MINUTES - 5) * 60
            return {"X-aws-proxy-auth": self._token, "X-aws-proxy-port": str(RUNNER_PORT)}


class MicrovmSandboxes(Sandboxes):
    languages = frozenset(LANGUAGES)  # the image carries every toolchain
    named_sessions = False  # a session id is its VM's
    cancels = False  # a run key names no VM: see `cancel`

    def __init__(self, config: MicrovmConfig, api: MicrovmApi | None = None) -> None:
        self.config = config
        self.api = api or MicrovmApi(config.endpoint_url)
        self.ttl_seconds = min(config.lease_ttl_seconds, MAX_SECONDS)
        self._vms: OrderedDict[str, _Vm] = OrderedDict()
        self._vms_lock = threading.Lock()

    def close(self) -> None:
        """Let go of the connections to the VMs (their endpoints wait for them to close)."""
        with self._vms_lock:
            vms, self._vms = list(self._vms.values()), OrderedDict()
        for vm in vms:
            vm.port.client.close()

    # -- the coarse operations: one request to the session's VM -------------------------------

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: RunSlot = contextlib.nullcontext) -> Ran:
        """In the first candidate VM that admits the caller, else in a new one. Inputs of
        other sessions are other VMs': read once per origin, streamed into the run."""
        where = run.placement
        for session_id in dict.fromkeys(where.candidates):
            with contextlib.suppress(SessionNotFound):
                return self._run_in(session_id, run, slot)
        if not where.new:
            raise SessionNotFound()
        with slot():  # before the launch: a refused run makes no VM
            session_id = self._launch()
            try:
                return self._run_in(session_id, run, contextlib.nullcontext, new=True)
            except BaseException:
                self.end(session_id)  # a VM without its session would idle to its TTL
                raise

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        if not placement.new:
            (session_id,) = placement.candidates
            with self._port(session_id) as port:
                return port.write_files(placement, files, limit)
        session_id = self._launch()
        try:
            with self._port(session_id) as port:
                return port.write_files(_made_in(placement, session_id), files, limit)
        except BaseException:
            self.end(session_id)  # a VM launched for a failed upload would hold nothing
            raise

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        with self._port(session_id) as port:
            return port.list_files(session_id, access)

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        with self._port(session_id) as port:
            return port.read_file(session_id, access, file_id)

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        with self._port(session_id) as port:
            return port.stat_file(session_id, access, file_id)

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        with self._port(session_id) as port:
            return port.remove_file(session_id, access, file_id)

    def read_inputs(self, session_id: str, access: Access, inputs: Iterable[Input]) -> Iterator[Carried]:
        with self._port(session_id) as port:
            return port.read_inputs(session_id, access, inputs)

    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        with self._port(session_id) as port:
            return port.read_record(session_id, access, key)

    def _run_in(self, session_id: str, run: Run, slot: RunSlot, new: bool = False) -> Ran:
        if new:
            here = replace(run, placement=_made_in(run.placement, session_id))
        else:
            here = replace(run, placement=replace(run.placement, candidates=(session_id,), named=None, new=False))
        with self._port(session_id) as port:
            return port.execute(here, self._carried(session_id, run), slot)

    def _carried(self, session_id: str, run: Run) -> Iterator[Carried]:
        """The inputs that live in other VMs, read from each once, as the run pulls them."""
        by_origin: dict[str, list[int]] = {}
        for index, wanted in enumerate(run.inputs):
            if wanted.origin and wanted.origin != session_id:
                by_origin.setdefault(wanted.origin, []).append(index)
        for origin, indexes in by_origin.items():
            with contextlib.suppress(SessionNotFound):
                found = self.read_inputs(origin, run.reader, [run.inputs[i] for i in indexes])
                yield from (replace(c, index=indexes[c.index]) for c in found)

    # -- ending and the reaper -------------------------------------------------------------

    def end(self, session_id: str) -> None:
        with contextlib.suppress(vm_ids.Unmappable):
            self.api.terminate(vm_ids.vm_of(session_id))

    def cancel(self, run_key: str) -> None:
        """A no-op: a run key names no session, so no VM to ask. A run stops at its time limit."""

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """Never calls the VM: a VM that AWS suspended has had no traffic for the idle
        limit, so no call is using it; one past its TTL is ended by AWS at that moment anyway."""
        try:
            lease = self.lease(session_id)
        except SessionNotFound:
            return False
        if not still_due(lease):
            return False
        self.api.terminate(vm_ids.vm_of(session_id))
        return True

    def lease(self, session_id: str) -> Lease:
        """From the control plane alone (`GetMicrovm`): a call to the VM would wake it."""
        try:
            lease = self._lease(self.api.get(vm_ids.vm_of(session_id)))
        except vm_ids.Unmappable:
            lease = None
        if lease is None:
            raise SessionNotFound()
        return lease

    def leases(self) -> Iterator[Lease]:
        for item in self.api.microvms(self.config.image):
            lease = self._lease(item)
            if lease is not None:
                yield lease

    # -- the VMs ----------------------------------------------------------------------------

    def _launch(self) -> str:
        """A new VM, its key given by its run hook; its session id once it runs. A VM that
        stops on the way, or takes too long, is ended and the caller told to retry."""
        started = self.api.launch(**self._request())
        vm_id = started["microvmId"]
        try:
            session_id = vm_ids.session_of(vm_id)
        except vm_ids.Unmappable as exc:
            self.api.terminate(vm_id)
            raise BackendUnavailable(str(exc)) from exc
        deadline = time.monotonic() + self.config.boot_seconds
        # AWS runs a VM once its run hook has answered: its runner has the key then.
        while (state := self._state(vm_id))[0] != "RUNNING":
            if state[0] in _ENDED:
                self.api.terminate(vm_id)
                raise BackendUnavailable(f"the MicroVM stopped while it booted ({state[1]})", retry_after=1)
            if time.monotonic() > deadline:
                self.api.terminate(vm_id)
                raise BackendUnavailable("the MicroVM did not boot in time", retry_after=5)
            time.sleep(0.1)
        self._vm(vm_id, started["endpoint"])
        return session_id

    def _request(self) -> dict[str, Any]:
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

    def _state(self, vm_id: str) -> tuple[str, str]:
        try:
            vm = self.api.get(vm_id)
        except SessionNotFound:
            return "TERMINATED", "not found"
        return str(vm["state"]), str(vm.get("stateReason") or "no reason given")

    @contextlib.contextmanager
    def _port(self, session_id: str) -> Iterator[RunnerPort]:
        """The port of the session's VM; failing to answer once AWS says the VM ended (its
        TTL, an idle one reaped) is the session being gone."""
        try:
            vm_id = vm_ids.vm_of(session_id)
        except vm_ids.Unmappable:
            raise SessionNotFound() from None
        with self._vms_lock:
            known = self._vms.get(vm_id)
        if known is None:
            vm = self.api.get(vm_id)
            if vm["state"] in _ENDED:
                raise SessionNotFound()
            known = self._vm(vm_id, vm["endpoint"])
        try:
            yield known.port
        except BackendUnavailable:
            if self._state(vm_id)[0] in _ENDED:
                raise SessionNotFound() from None
            raise

    def _vm(self, vm_id: str, endpoint: str) -> _Vm:
        with self._vms_lock:
            vm = self._vms.get(vm_id)
            if vm is None:
                vm = self._vms[vm_id] = _Vm(vm_id, https(endpoint), self)
                while len(self._vms) > _CLIENTS_KEPT:
                    self._vms.popitem(last=False)[1].port.client.close()
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


def _made_in(placement: Placement, session_id: str) -> Placement:
    """The placement of a new VM's first request: its session made there, named after it."""
    return replace(placement, candidates=(), named=session_id, new=True)
