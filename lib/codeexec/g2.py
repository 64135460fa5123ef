"""The routes only the second generation of clients calls (LibreChat v0.8.6+,
@librechat/agents 3.2 to 3.9): a batch upload, and one object's metadata or removal.

The routes both generations call (/v1/exec, /v1/upload, /v1/download) are app.py's and
serve both: G2's extra fields are read by wire.FileRef and answered by wire.UploadReply
and wire.OutputFile. Auth is the one dependency every route uses (app._org): a G2 client
authenticates with LibreChat's bearer token alone, in the `jwt` mode.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from . import ids
from .app import OrgDep, ServiceDep, receive_upload, remove_file, summary
from .wire import BatchUploadedFile, BatchUploadReply

UPLOAD_BATCH_PATH = "/v1/upload/batch"
OBJECT_PATH = "/v1/sessions/{session_id}/objects/{file_id:path}"

router = APIRouter()


@router.post(UPLOAD_BATCH_PATH)
async def upload_batch(request: Request, service: ServiceDep, org: OrgDep) -> BatchUploadReply:
    reply = await receive_upload(request, service, org)
    files = [BatchUploadedFile(fileId=f.fileId, filename=f.filename) for f in reply.files]
    return BatchUploadReply(
        session_id=reply.session_id,
        storage_session_id=reply.storage_session_id,
        files=files,
        succeeded=len(files),
    )


@router.get(OBJECT_PATH)
def object_info(session_id: str, file_id: str, service: ServiceDep, org: OrgDep) -> dict[str, Any]:
    """LibreChat reads `lastModified` here to decide whether to upload a file again."""
    path = ids.file_path(file_id)
    with service.sandboxes.open(org, session_id) as sandbox:
        reader, info = sandbox.open_file(path)
    reader.close()
    return summary(session_id, info, full=True)


@router.delete(OBJECT_PATH)
def delete_object(session_id: str, file_id: str, service: ServiceDep, org: OrgDep) -> dict[str, str]:
    path = remove_file(service, org, session_id, file_id)
    return {"message": "success", "storage_session_id": session_id, "fileId": path}
