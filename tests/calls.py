"""The calls most tests make, as LibreChat makes them, and what they read back."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from codeexec import ids


def run(client: TestClient, code: str, lang: str = "py", **extra: object) -> dict:
    reply = client.post("/v1/exec", json={"lang": lang, "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def upload(client: TestClient, name: str, data: bytes, form: dict | None = None, **params: str) -> dict:
    """A user's attachment, as G1 LibreChat uploads it (an agent's file adds `entity_id`)."""
    reply = client.post("/v1/upload", data=form or {}, files={"file": (name, data)}, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def names(body: dict) -> list[str]:
    """The paths of the files an exec reply lists."""
    return [f["name"] for f in body["files"]]


def file_id(session_id: str, path: str) -> str:
    """The id the service gives a file: derived from its session and its path."""
    return ids.file_id(session_id, path)


def session_on_runner(client: TestClient, runner: int, data: bytes) -> str:
    """A new session of the caller's (an upload of a.txt) that a fleet placed on `runner`.
    Tried for a few health intervals: a runner that was busy when last asked is passed over
    until it is asked again."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        session = upload(client, "a.txt", data)["session_id"]
        if ids.runner_of(session) == runner:
            return session
        time.sleep(0.02)
    raise AssertionError(f"no new session landed on runner {runner}")
