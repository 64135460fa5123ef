"""Sessions: what every route asks of a session, composed over the sandbox port.

Each call is one coarse operation of the port (one request to a remote backend), given as
data: who asks (access.py), what is asked (commands.py, which the API builds from a
request), where a run lands (placement.py), which inputs it brings (inputs.py); what comes
back is the domain's report (outputs.py), which the API puts in the wire's shapes. Leases,
holds and input copies happen inside the operation, at the backend, so what a reply reports
is what its own call did. Nothing here knows HTTP, or the wire's shapes.

It holds no state. The caller is a parameter of every call, passed down from auth and
never read from a request body: a caller that could name the tenant could act in another
one. Programmatic tool calling composes these same pieces (codeexec.programmatic).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import BinaryIO, TypeVar

from .. import ids
from ..auth import Caller
from ..errors import BadRequest, FileNotFound, ListingNeeded
from ..languages import canonical
from ..large_files import LargeFiles
from ..sandbox.port import FileInfo, Placement, Program, Quota, Ran, Run, RunSlot, Sandboxes, SendTo
from ..telemetry import calls
from . import inputs, outputs, placement
from .access import changing, reading, run_key
from .commands import Execute, Landing, Upload
from .outputs import Report

__all__ = ["Download", "Report", "SessionLimits", "Sessions", "run_key"]

T = TypeVar("T")
# A listing's slot for a user (the admission's), held while one is taken.
ListingSlot = Callable[[Hashable], AbstractContextManager[None]]


@dataclass(frozen=True)
class SessionLimits:
    run_timeout_seconds: float
    max_files_per_run: int  # files listed in one exec reply
    max_upload_bytes: int  # one uploaded file
    max_user_bytes: int = 0  # all of a user's sessions together, on every host (0: no quota)
    max_tenant_bytes: int = 0  # all of an organization's

    def quota(self, caller: Caller) -> Quota | None:
        """The caller's storage quota: its user's, and its organization's (a named key's
        `stored_bytes` where it has one)."""
        key = caller.key
        tenant = key.stored_bytes if key is not None and key.stored_bytes is not None else self.max_tenant_bytes
        return Quota(self.max_user_bytes, tenant) if self.max_user_bytes or tenant else None

    def run_timeout(self, asked_ms: float | None) -> float:
        """The seconds a run may take: what the client asked (in milliseconds), never more
        than the service's limit."""
        limit = self.run_timeout_seconds
        return min(asked_ms / 1000, limit) if asked_ms else limit


@dataclass(frozen=True)
class Download:
    """One file for a download: its bytes to answer with, or, for a file too large for
    an answer, the key it was put under in the large-files bucket."""

    info: FileInfo
    reader: BinaryIO | None = None
    key: str | None = None


class Sessions:
    def __init__(
        self,
        sandboxes: Sandboxes,
        limits: SessionLimits,
        large_files: LargeFiles | None = None,
        run_slot: RunSlot = contextlib.nullcontext,
        listing_slot: ListingSlot = lambda user: contextlib.nullcontext(),
    ) -> None:
        self.sandboxes = sandboxes
        self.limits = limits
        self.large_files = large_files
        self.run_slot = run_slot  # the admission's, taken once a run holds its session
        self.listing_slot = listing_slot  # the admission's, in the caller's listing share

    # -- reads --------------------------------------------------------------------------

    def list_files(self, caller: Caller, session_id: str) -> list[FileInfo]:
        calls.note_session(session_id, caller.owner.tag())
        return self.sandboxes.list_files(session_id, reading(caller))

    def download(self, caller: Caller, session_id: str, file_id: str) -> Download:
        """The file's bytes, or, when it is large and a bucket is configured, the file put
        in the bucket: by the sandbox itself where its backend can send files (the bytes
        then never pass through here), else from here."""
        calls.note_session(session_id, caller.owner.tag())
        large = self.large_files
        key = large.new_key() if large else None
        send_to = SendTo(large.put_url(key), large.from_bytes) if large and key else None
        access = reading(caller)
        opened = self._by_id(
            caller, session_id, file_id, lambda found: self.sandboxes.read_file(session_id, access, found, send_to)
        )
        if opened.reader is None:
            return Download(opened.info, key=key)
        if large is None or key is None or not large.is_large(opened.info.size):
            return Download(opened.info, reader=opened.reader)
        with opened.reader:
            large.store(opened.reader, key)
        return Download(opened.info, key=key)

    def stat(self, caller: Caller, session_id: str, file_id: str) -> FileInfo:
        calls.note_session(session_id, caller.owner.tag())
        access = reading(caller)
        return self._by_id(
            caller, session_id, file_id, lambda found: self.sandboxes.stat_file(session_id, access, found)
        )

    def _by_id(self, caller: Caller, session_id: str, file_id: str, call: Callable[[str], T]) -> T:
        """`call` with a file's id; where only a listing of its session finds it, the
        listing is taken in the caller's listing share (a made-up id's costs a listing's
        share, not a download's), and `call` given the path found."""
        try:
            return call(file_id)
        except ListingNeeded:
            pass
        with self.listing_slot(caller.owner.tag()):
            listing = self.sandboxes.list_files(session_id, reading(caller))
        path = next((f.path for f in listing if ids.file_id(session_id, f.path) == file_id), None)
        if path is None:
            raise FileNotFound()
        try:
            return call(path)
        except ListingNeeded:  # gone meanwhile, and its path has an id's shape
            raise FileNotFound() from None

    # -- changes ------------------------------------------------------------------------

    def remove(self, caller: Caller, session_id: str, file_id: str) -> str:
        """Remove one file; returns its path."""
        calls.note_session(session_id, caller.owner.tag())
        access = changing(caller)
        return self._by_id(
            caller, session_id, file_id, lambda found: self.sandboxes.remove_file(session_id, access, found)
        )

    def upload(self, caller: Caller, upload: Upload) -> tuple[str, list[str]]:
        """Store every file or none; returns the session and the paths the files got.
        Without a session id the upload leases a new session (what LibreChat does). The
        files are pulled one by one as the backend writes them (their bodies are streams)."""
        paths: list[str] = []
        seen: set[str] = set()  # a list's `in` made an upload cost the square of its file count

        def named() -> Iterator[tuple[str, BinaryIO]]:
            for filename, reader in upload.files:
                path = ids.upload_path(filename)
                if path in seen:
                    raise BadRequest("two files of the upload have the same path")
                seen.add(path)
                paths.append(path)
                yield path, reader
            if not paths:
                raise BadRequest("the upload has no file")

        quota = self.limits.quota(caller)
        if upload.session_id:  # it keeps what it is: shared or not, read-only or not
            where = Placement(changing(caller), (upload.session_id,), new=False, quota=quota)
        else:
            where = Placement(changing(caller), shared=upload.shared, read_only=upload.read_only, quota=quota)
        session = self.sandboxes.write_files(where, named(), self.limits.max_upload_bytes)
        calls.note_session(session, caller.owner.tag())
        return session, paths

    def execute(self, caller: Caller, order: Execute) -> Report:
        """Place the session, bring the inputs in, run the program, report what it changed."""
        timeout = self.limits.run_timeout(order.timeout_ms)
        program = Program(canonical(order.lang), order.code, order.args, timeout, order.run_key)
        self.sandboxes.check_language(order.lang)
        where = placement.for_run(caller, order.landing, self.sandboxes.named_sessions)
        ran = self.run(caller, Run(program, where, inputs.of(order.landing.inputs)))
        return self.report(ran, where, order.landing)

    def run(self, caller: Caller, run: Run) -> Ran:
        """A run through the port, in one of the service's run slots, its writes held to the
        caller's quota."""
        started = time.perf_counter()
        run = replace(run, placement=replace(run.placement, quota=self.limits.quota(caller)))
        ran = self.sandboxes.execute(run, slot=self.run_slot)
        calls.note_session(ran.session_id, run.placement.access.owner)
        calls.note_run(run.program.lang, ran.result, time.perf_counter() - started)
        return ran

    def report(self, ran: Ran, where: Placement, landing: Landing) -> Report:
        """The domain's answer to a run: what it wrote, what it said, and the notes on its
        inputs and limits (also a programmatic workflow's last round's)."""
        refs = landing.inputs
        found = outputs.report(
            ran.session_id, ran.result, ran.changes, inputs.chosen(refs), ran.inputs, inputs.missing(refs, ran.inputs),
            self.limits.max_files_per_run, landing.echo_inputs,
        )  # fmt: skip
        return replace(found, runtime_status=placement.runtime_status(where, ran.created))

    def cancel(self, caller: Caller, request_id: str) -> None:
        """Stop the run a client's request runs (its X-LibreChat-Code-Request-ID)."""
        self.sandboxes.cancel(run_key(caller, request_id))

    def end(self, session_id: str) -> None:
        """End a session now instead of leaving it to the reaper. Nothing on the API calls
        this (a session outlives its run: the reply hands back an id the next calls use),
        but a one-shot caller such as a function invocation is over the moment it answers."""
        self.sandboxes.end(session_id)
