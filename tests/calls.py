"""The two calls most tests make, as LibreChat makes them."""

from __future__ import annotations

from fastapi.testclient import TestClient


def run(client: TestClient, code: str, lang: str = "py", **extra: object) -> dict:
    reply = client.post("/v1/exec", json={"lang": lang, "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def upload(client: TestClient, name: str, data: bytes, **params: str) -> dict:
    # LibreChat's order: entity_id first, then the file part.
    reply = client.post("/v1/upload", data={"entity_id": "asst_1"}, files={"file": (name, data)}, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()
