"""What the routes ask of the sessions, in the domain's own words: a run, an upload.

The API turns each request into one of these at its edge (`codeexec.api.commands`): what a
request's fields and headers mean (the two spellings of a file's session, which kinds of
file an organization shares, the stateful profile) is read there once, and nothing here
knows the wire's shapes. Who asks is not part of a command: the caller, from auth, is a
parameter of every call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class InputRef:
    """A file a run brings in, as the client refers to it: by its id and name, in the
    session it lives in."""

    id: str
    name: str | None = None
    session_id: str | None = None  # where it lives (None: the run's own)
    shared: bool = False  # an agent's or a skill's file: a run copies it, never lands beside it
    # The client's own words on the file (G2), handed back as they came when a run leaves
    # it as it was.
    resource_id: str | None = None
    kind: str | None = None
    version: int | None = None


@dataclass(frozen=True)
class Landing:
    """What a run says of where it lands (placement.py) and what it brings (inputs.py)."""

    session_id: str | None = None  # the session it asks for
    hint: str | None = None  # the stateful profile's conversation: one session per hint and user
    stateful: bool = False  # the client expects a stateful workspace
    inputs: tuple[InputRef, ...] = ()
    echo_inputs: bool = False  # inputs it leaves as they were are listed back (G2)


@dataclass(frozen=True)
class Execute:
    """Run one program (POST /v1/exec)."""

    lang: str  # as the client named it (`python`, `node`, `sh`...)
    code: str
    args: tuple[str, ...] = ()
    timeout_ms: float | None = None  # what the client asked; never past the service's limit
    landing: Landing = Landing()
    run_key: str | None = None  # what a cancel names the run by (sessions.access.run_key)


@dataclass(frozen=True)
class Upload:
    """Store files, every one or none. Into the session it names, else into a new one of
    the caller's, shared by the organization (an agent's files, a skill) or not, read-only
    (inputs a run may change in its own copy, never hand back) or not. Each file goes to
    the path its name says (`ids.upload_path`)."""

    files: Iterable[tuple[str | None, BinaryIO]]  # (the name it was sent with, its bytes as they arrive)
    session_id: str | None = None
    shared: bool = False
    read_only: bool = False
