"""A session's files: uploads (one file or a batch), downloads, listings, one object's
metadata, removals. Both generations of clients call these; G2 (LibreChat v0.8.6+) adds
the batch upload and the object routes."""

from __future__ import annotations

import mimetypes
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, BinaryIO, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile
from starlette.types import Message, Receive

from ...errors import BadRequest, TooLarge
from ...sandbox.port import FileInfo, Owner
from ...wire import BatchUploadedFile, BatchUploadReply, UploadedFile, UploadReply
from ..dependencies import OwnerDep, Service, ServiceDep

UPLOAD_PATH = "/v1/upload"
UPLOAD_BATCH_PATH = "/v1/upload/batch"
DOWNLOAD_PATH = "/v1/download/{session_id}/{file_id:path}"
FILES_PATH = "/v1/files/{session_id}"
FILE_PATH = "/v1/files/{session_id}/{file_id:path}"
OBJECT_PATH = "/v1/sessions/{session_id}/objects/{file_id:path}"
# Room for the multipart framing around the file.
_FRAMING_BYTES = 65_536

router = APIRouter()


@router.post(UPLOAD_PATH)
async def upload(request: Request, service: ServiceDep, owner: OwnerDep) -> UploadReply:
    session_id, names = await _receive_upload(request, service, owner)
    files = [UploadedFile(fileId=n, filename=n) for n in names]
    return UploadReply(session_id=session_id, storage_session_id=session_id, files=files)


@router.post(UPLOAD_BATCH_PATH)
async def upload_batch(request: Request, service: ServiceDep, owner: OwnerDep) -> BatchUploadReply:
    session_id, names = await _receive_upload(request, service, owner)
    files = [BatchUploadedFile(fileId=n, filename=n) for n in names]
    return BatchUploadReply(session_id=session_id, storage_session_id=session_id, files=files, succeeded=len(files))


@router.get(DOWNLOAD_PATH)
def download(session_id: str, file_id: str, service: ServiceDep, owner: OwnerDep) -> StreamingResponse:
    reader, info = service.sessions.open_file(owner, session_id, file_id)
    name = info.path.rsplit("/", 1)[-1]
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    headers = {"Content-Length": str(info.size), "Content-Disposition": _disposition(name)}
    return StreamingResponse(_chunks(reader), media_type=media_type, headers=headers)


@router.get(FILES_PATH)
def list_files(
    session_id: str,
    service: ServiceDep,
    owner: OwnerDep,
    detail: Annotated[Literal["summary", "simple", "full"], Query()] = "simple",
) -> list[Any]:
    found = service.sessions.list_files(owner, session_id)
    if detail == "simple":
        return [f"{session_id}/{f.path}" for f in found]
    return [_summary(session_id, f, full=detail == "full") for f in found]


@router.delete(FILE_PATH)
def delete_file(session_id: str, file_id: str, service: ServiceDep, owner: OwnerDep) -> dict[str, str]:
    path = service.sessions.remove(owner, session_id, file_id)
    return {"message": "success", "session_id": session_id, "fileId": path}


@router.get(OBJECT_PATH)
def object_info(session_id: str, file_id: str, service: ServiceDep, owner: OwnerDep) -> dict[str, Any]:
    """LibreChat reads `lastModified` here to decide whether to upload a file again."""
    return _summary(session_id, service.sessions.stat(owner, session_id, file_id), full=True)


@router.delete(OBJECT_PATH)
def delete_object(session_id: str, file_id: str, service: ServiceDep, owner: OwnerDep) -> dict[str, str]:
    path = service.sessions.remove(owner, session_id, file_id)
    return {"message": "success", "storage_session_id": session_id, "fileId": path}


async def _receive_upload(request: Request, service: Service, owner: Owner) -> tuple[str, list[str]]:
    """Both generations' uploads, one file or a batch. G2's `kind`/`id`/`version` fields
    select nothing here: a session belongs to the organization (see wire.Kind)."""
    limit = service.sessions.limits.max_upload_bytes
    body_limit = limit + _FRAMING_BYTES
    if int(request.headers.get("content-length") or 0) > body_limit:
        raise TooLarge(f"the upload is larger than the {limit} byte limit")
    # A chunked body declares no length: count it as it arrives, so an endless one stops
    # at the limit instead of filling the parser's spool files.
    form = await Request(request.scope, _capped(request.receive, body_limit, limit)).form()
    parts = [p for p in form.getlist("file") + form.getlist("files") if isinstance(p, UploadFile)]
    if not parts:
        raise BadRequest("the form has no file part (named 'file' or 'files')")
    session_id = str(form.get("session_id") or request.query_params.get("session_id") or "") or None
    files = [(part.filename, part.file) for part in parts]
    return await run_in_threadpool(service.sessions.upload, owner, session_id, files)


def _capped(receive: Receive, body_limit: int, limit: int) -> Receive:
    received = 0

    async def capped_receive() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > body_limit:
            raise TooLarge(f"the upload is larger than the {limit} byte limit")
        return message

    return capped_receive


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


def _summary(session_id: str, f: FileInfo, full: bool) -> dict[str, Any]:
    modified = datetime.fromtimestamp(f.mtime_ns / 1e9, UTC).isoformat(timespec="milliseconds")
    item: dict[str, Any] = {
        "name": f"{session_id}/{f.path}",
        "id": f.path,
        "size": f.size,
        "lastModified": modified.replace("+00:00", "Z"),
    }
    if full:
        content_type = mimetypes.guess_type(f.path)[0] or "application/octet-stream"
        original = f.path.rsplit("/", 1)[-1]
        item |= {"contentType": content_type, "metadata": {"content-type": content_type, "original-filename": original}}
    return item
