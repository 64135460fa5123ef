"""One runner's port: every coarse operation of the port one request to a runner
(`python -m codeexec.runner`; routes in protocol.py). The `runner` backend (fleet.py) routes
each call to one of these, and the `microvm` backend to its session's VM's.

The runner answers each with the `local` backend's own operation: the session's lease,
its use (the reaper keeps away) and its exclusive hold are taken and let go of inside the
request, so a caller that died mid-call leaves nothing held. Access travels as data and
the runner checks it itself: a caller it does not admit never touches the session. Inputs
from other sessions of the runner are copied there, where the bytes are.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any, BinaryIO

from ... import ids
from ...errors import SessionNotFound, TooLarge
from ..port import Access, Carried, FileInfo, HostReport, Input, Lease, Opened, Placement, Ran, Run, RunSlot, SendTo
from . import protocol
from .client import ResponseReader, RunnerClient

# Compiled languages get at least this long per run (the local backend's floor).
_SLOWEST_RUN_SECONDS = 60.0
# What a request may take beyond its own work: the runner's sandbox set-up, a busy host.
_GRACE_SECONDS = 30.0


def call_seconds(run_timeout_seconds: float) -> float:
    """The longest one request may take: a run, and the copies and listings around it."""
    return 2 * max(run_timeout_seconds, _SLOWEST_RUN_SECONDS) + 4 * _GRACE_SECONDS


class RunnerPort:
    """The port over one runner's client: what the `runner` backend routes each call to,
    and what the `microvm` backend talks to once it has found a session's VM."""

    def __init__(self, client: RunnerClient) -> None:
        self.client = client

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: RunSlot = contextlib.nullcontext) -> Ran:
        frames = itertools.chain(
            [(protocol.run_json(run), None)],
            (({"index": c.index, "found": c.found, "read_only": c.read_only}, c.reader) for c in carried),
        )
        with slot():
            answer = self.client.call(protocol.RUN.at(), content=protocol.frames(frames))
        return protocol.ran_of(answer)

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        spec = {"placement": protocol.placement_json(placement), "limit": limit}
        bounded = (({"path": path}, _Bounded(data, limit)) for path, data in files)
        frames: Iterable[tuple[dict[str, Any], protocol.Readable | None]] = itertools.chain([(spec, None)], bounded)
        answer = self.client.call(protocol.WRITE.at(), content=protocol.frames(frames))
        return str(answer["session_id"])

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        listing = self.client.call(_at(protocol.LIST, session_id), params=protocol.access_params(access))
        return [protocol.file_of(item) for item in listing]

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        params = {**protocol.access_params(access), "id": file_id}
        head, body = self.client.fetch(_at(protocol.READ, session_id), params=params)
        return Opened(protocol.file_of(head), body)

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        params = {**protocol.access_params(access), "id": file_id}
        return protocol.file_of(self.client.call(_at(protocol.STAT, session_id), params=params))

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        params = {**protocol.access_params(access), "id": file_id}
        return str(self.client.call(_at(protocol.REMOVE, session_id), params=params)["path"])

    def read_inputs(self, session_id: str, access: Access, inputs: Iterable[Input]) -> Iterator[Carried]:
        if not ids.is_session_id(session_id):
            raise SessionNotFound()
        return self.carry(access, [replace(i, origin=session_id) for i in inputs])

    def carry(self, access: Access, inputs: list[Input]) -> Iterator[Carried]:
        """Inputs of any of the runner's sessions (each names its origin), in one request,
        for a run elsewhere to carry in, each read to its end before the next; those not
        found are left out. Indexes are into `inputs`."""
        params = protocol.access_params(access)
        target = protocol.READS.at()
        stack, response = self.client.opened(target, params=params, json=protocol.inputs_json(inputs))
        with stack:
            reader = ResponseReader(stack, response, target)
            for header, body in protocol.frames_of(reader.read):
                yield Carried(int(header["index"]), str(header["found"]), bool(header["read_only"]), body)

    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        _, body = self.client.fetch(_at(protocol.RECORD, session_id, key=key), params=protocol.access_params(access))
        with body:
            return body.read()

    def lease(self, session_id: str) -> Lease:
        return protocol.lease_of(self.client.call(_at(protocol.LEASE, session_id)))

    def usage(self, epoch: str, since: int) -> dict[str, Any]:
        return dict(self.client.call(protocol.USAGE.at(), params={"epoch": epoch, "since": since}))

    def report(self) -> HostReport:
        return protocol.report_of(self.client.call(protocol.REPORT.at()))

    def end(self, session_id: str) -> None:
        if ids.is_session_id(session_id):
            self.client.call(protocol.END.at(sid=session_id))

    def cancel(self, run_key: str) -> None:
        if ids.is_file_id(run_key):  # the shape of every run key; anything else names no run
            self.client.call(protocol.CANCEL.at(run_key=run_key))


def _at(route: protocol.Route, session_id: str, **parts: str) -> protocol.Target:
    """A session's route; an id of the wrong shape never reaches the runner."""
    if not ids.is_session_id(session_id):
        raise SessionNotFound()
    return route.at(sid=session_id, **parts)


class _Bounded:
    """A file's bytes counted as they go: an oversized one stops at once instead of being
    sent whole (the runner counts too)."""

    def __init__(self, data: BinaryIO, limit: int) -> None:
        self._data, self._limit, self._sent = data, limit, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._data.read(size)
        self._sent += len(chunk)
        if self._sent > self._limit:
            raise TooLarge(f"the file is larger than {self._limit} bytes")
        return chunk
