"""A bare file id (a download's, a file's stat or removal: no name comes with it) is found
without listing its session (issue 42): each session keeps its files' ids
(sandbox/local/fileids.py). A made-up id costs no listing; a file a run made, moved or
nested is found by its id; a session whose record a crash left short, or that is older
than the record, is listed once, in the caller's listing share, and is whole again after."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from codeexec import ids
from codeexec.api.admission import LISTINGS
from codeexec.api.app import create_app
from codeexec.auth import Caller
from codeexec.errors import RateLimited
from codeexec.sandbox.local import files
from codeexec.settings import Settings

from ..calls import run, upload
from ..conftest import API_KEY
from ..serving import Services

MADE_UP = ids.derived_id("made", "up")


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every listing of a session's files the backend takes, counted."""
    counted: list[str] = []

    def counting(real: Callable[[str], list]) -> Callable[[str], list]:
        def listing(root: str) -> list:
            counted.append(root)
            return real(root)

        return listing

    monkeypatch.setattr(files, "list_beneath", counting(files.list_beneath))
    monkeypatch.setattr(files, "walk_beneath", counting(files.walk_beneath))
    return counted


def made(client: TestClient) -> str:
    """A session with an upload, and what a run made of it: a move, and a nested file."""
    session = upload(client, "a.txt", b"uploaded")["session_id"]
    run(client, "mkdir -p d/e && echo nested > d/e/f.txt && mv a.txt moved.txt && echo new > new.txt", "bash",
        session_id=session)  # fmt: skip
    return session


def cut_short(sandbox_root: Path, session: str) -> None:
    """As a crash leaves a session: its run wrote late.txt, then the service died before
    the listing after it."""
    record = sandbox_root / session / "ids"
    (record / ".whole").rename(record / ".stale")
    data = sandbox_root / session / "data"
    (data / "late.txt").write_bytes(b"written as it died")
    os.chown(data / "late.txt", data.stat().st_uid, data.stat().st_gid)


def found(client: TestClient, session: str, path: str) -> bytes:
    got = client.get(f"/v1/download/{session}/{ids.file_id(session, path)}")
    assert got.status_code == 200, got.text
    return got.content


def test_an_id_is_found_and_a_made_up_one_refused_without_a_listing(client: TestClient, listings: list[str]) -> None:
    session = made(client)
    listings.clear()
    assert found(client, session, "moved.txt") == b"uploaded"
    assert found(client, session, "d/e/f.txt") == b"nested\n"
    assert client.get(f"/v1/sessions/{session}/objects/{ids.file_id(session, 'new.txt')}").status_code == 200
    for route in (f"/v1/download/{session}/{MADE_UP}", f"/v1/sessions/{session}/objects/{MADE_UP}"):
        assert client.get(route).status_code == 404
    assert client.delete(f"/v1/files/{session}/{MADE_UP}").status_code == 404
    assert client.get(f"/v1/download/{session}/{ids.file_id(session, 'a.txt')}").status_code == 404  # moved away
    assert listings == []


@pytest.mark.parametrize("cut", ["a crash cut a run short", "older than the record"])
def test_a_session_whose_record_is_short_is_listed_once(
    client: TestClient, sandbox_root: Path, listings: list[str], cut: str
) -> None:
    session = made(client)
    record = sandbox_root / session / "ids"
    if cut == "older than the record":
        for link in record.iterdir():
            link.unlink()
        record.rmdir()
    else:
        cut_short(sandbox_root, session)
    listings.clear()
    assert found(client, session, "d/e/f.txt") == b"nested\n"
    if cut == "a crash cut a run short":
        assert found(client, session, "late.txt") == b"written as it died"
    assert len(listings) == 1  # the first id looked for lists it, and its record is whole again
    assert client.get(f"/v1/download/{session}/{MADE_UP}").status_code == 404
    assert found(client, session, "new.txt") == b"new\n"
    assert len(listings) == 1


def test_a_download_that_lists_takes_the_callers_listing_share(client: TestClient, sandbox_root: Path) -> None:
    session = made(client)
    cut_short(sandbox_root, session)
    admission = client.app.state.service.admission  # type: ignore[attr-defined]
    caller = Caller(Settings().code_exec_org, None).owner.tag()  # the key holder naming no user
    slots: list[AbstractContextManager[None]] = []
    with pytest.raises(RateLimited):  # every listing slot the caller may hold, held
        while len(slots) <= LISTINGS:
            slots.append(admission.read("listing", caller))
            slots[-1].__enter__()
    slots.pop()
    try:
        assert client.get(f"/v1/download/{session}/{ids.file_id(session, 'late.txt')}").status_code == 429
        assert found(client, session, "new.txt") == b"new\n"  # its id was recorded: no listing
        assert client.get(f"/v1/download/{session}/late.txt").status_code == 200  # nor for a path
    finally:
        for slot in slots:
            slot.__exit__(None, None, None)
    assert found(client, session, "late.txt") == b"written as it died"


def test_a_full_session_still_finds_its_files(settings: Settings, sandbox_root: Path, services: Services) -> None:
    """No room left for the record fails nothing: the record stays short, and a listing finds
    what it misses."""
    client = TestClient(create_app(services(settings.model_copy(update={"max_session_bytes": 8 << 20}))),
                        headers={"X-API-Key": API_KEY})  # fmt: skip
    filled = run(client, "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (900 << 10))\n    i += 1")
    assert "Disk quota exceeded" in filled["stderr"]
    session = filled["session_id"]
    assert len(found(client, session, "f0")) == 900 << 10
    assert client.get(f"/v1/download/{session}/{MADE_UP}").status_code == 404
