"""An upload takes at most 200 files, as the reference server's batch does: the 201st part
is refused at once with a 413 the client can read (`filesLimitReached`, `maxFiles`), before
the rest of the body is read, and nothing of the upload is stored."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ..calls import run, upload


def parts(count: int, name: str = "files") -> list[tuple[str, tuple[str, bytes]]]:
    return [(name, (f"f{n}.txt", b"x")) for n in range(count)]


def test_an_upload_of_more_than_200_files_is_refused_whole(client: TestClient) -> None:
    session = upload(client, "first.txt", b"1")["session_id"]
    over = client.post("/v1/upload/batch", files=parts(201), params={"session_id": session})
    assert over.status_code == 413, over.text
    body = over.json()
    assert body["filesLimitReached"] is True and body["maxFiles"] == 200 and "200" in body["details"]
    listed = client.get(f"/v1/files/{session}", params={"detail": "full"}).json()
    assert [entry["path"] for entry in listed] == ["first.txt"]  # none of the 201 stored

    # Parts that are no file to store count too: a body of thousands of empty parts.
    flood = client.post("/v1/upload", files=[("file", ("a.txt", b"")), *parts(5000, "other")])
    assert flood.status_code == 413 and flood.json()["maxFiles"] == 200

    exactly = client.post("/v1/upload/batch", files=parts(200))
    assert exactly.status_code == 200 and len(exactly.json()["files"]) == 200
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)", user_id="someone-else")["stdout"] == "42\n"
