"""A session's files: uploads (one file or a batch), downloads, listings, one object's
metadata, removals. Both generations of clients call these; G2 (LibreChat v0.8.6+) adds
the batch upload and the object routes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, BinaryIO, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from ...auth import Caller
from ...streams import request_body
from .. import commands, replies
from ..body_limits import UPLOAD_BODY, body_limit
from ..dependencies import CallerDep, Service, ServiceDep

UPLOAD_PATH = "/v1/upload"
UPLOAD_BATCH_PATH = "/v1/upload/batch"
DOWNLOAD_PATH = "/v1/download/{session_id}/{file_id:path}"
FILES_PATH = "/v1/files/{session_id}"
FILE_PATH = "/v1/files/{session_id}/{file_id:path}"
OBJECT_PATH = "/v1/sessions/{session_id}/objects/{file_id:path}"

router = APIRouter()


@router.post(UPLOAD_PATH)
@body_limit(UPLOAD_BODY)
async def upload(request: Request, service: ServiceDep, caller: CallerDep) -> replies.UploadReply:
    return replies.uploaded(*await _receive_upload(request, service, caller))


@router.post(UPLOAD_BATCH_PATH)
@body_limit(UPLOAD_BODY)
async def upload_batch(request: Request, service: ServiceDep, caller: CallerDep) -> replies.BatchUploadReply:
    return replies.uploaded_batch(*await _receive_upload(request, service, caller))


@router.get(DOWNLOAD_PATH)
def download(session_id: str, file_id: str, service: ServiceDep, caller: CallerDep) -> Response:
    """The file's bytes; a large one (over what a Lambda response carries) as a redirect
    to the large-files bucket, answering the same type and name from there."""
    with service.admission.read("download", caller.owner.tag()):
        got = service.sessions.download(caller, session_id, file_id)
    name = got.info.path.rsplit("/", 1)[-1]
    media_type = replies.media_type(name)
    if got.reader is None:
        assert got.key is not None and service.sessions.large_files is not None
        url = service.sessions.large_files.get_url(got.key, media_type, _disposition(name))
        # Not cached: the URL expires in minutes.
        return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    headers = {"Content-Length": str(got.info.size), "Content-Disposition": _disposition(name)}
    return StreamingResponse(_chunks(got.reader), media_type=media_type, headers=headers)


@router.get(FILES_PATH)
def list_files(
    session_id: str,
    service: ServiceDep,
    caller: CallerDep,
    detail: Annotated[Literal["summary", "simple", "full"], Query()] = "simple",
) -> list[Any]:
    with service.admission.read("listing", caller.owner.tag()):
        return replies.listing(session_id, service.sessions.list_files(caller, session_id), detail)


@router.delete(FILE_PATH)
def delete_file(session_id: str, file_id: str, service: ServiceDep, caller: CallerDep) -> dict[str, str]:
    return replies.removed(session_id, service.sessions.remove(caller, session_id, file_id), "session_id")


@router.get(OBJECT_PATH)
def object_info(session_id: str, file_id: str, service: ServiceDep, caller: CallerDep) -> dict[str, Any]:
    """LibreChat reads `lastModified` here to decide whether to upload a file again."""
    return replies.summary(session_id, service.sessions.stat(caller, session_id, file_id), full=True)


@router.delete(OBJECT_PATH)
def delete_object(session_id: str, file_id: str, service: ServiceDep, caller: CallerDep) -> dict[str, str]:
    return replies.removed(session_id, service.sessions.remove(caller, session_id, file_id), "storage_session_id")


async def _receive_upload(request: Request, service: Service, caller: Caller) -> tuple[str, list[str]]:
    """Both generations' uploads, one file or a batch (what an upload means: commands.py)."""
    # The gate has authenticated the caller and bounds the body (UPLOAD_BODY); the body is
    # read only with a slot, as it arrives, into the session (uploads.py). The slot counts
    # the session the query names: the form's fields are read with it held.
    caller = commands.uploader(request, caller)
    query_session = request.query_params.get("session_id")
    body = request_body(request.stream())

    def store() -> tuple[str, list[str]]:
        return service.sessions.upload(caller, commands.upload(request.headers, body, query_session))

    with service.admission.upload(caller.owner.tag(), query_session):
        return await run_in_threadpool(store)


def _chunks(reader: BinaryIO) -> Iterator[bytes]:
    # Each chunk of a sync iterator costs a thread hop: 256 KiB took a 1 MB download from
    # 7.1 to 5.1 ms (64 KiB chunks), still bounding the memory a download holds.
    with reader:
        while chunk := reader.read(1 << 18):
            yield chunk


def _disposition(name: str) -> str:
    quoted = quote(name)
    if quoted != name:  # RFC 6266: a non-ASCII or special name travels percent-encoded
        return f"attachment; filename*=utf-8''{quoted}"
    return f'attachment; filename="{name}"'
