"""Downloads too large for a Lambda response, handed over through a private S3 bucket.

Lambda and API Gateway carry at most 6 MB of response, base64-encoded for a binary file.
A larger file is put in the bucket under a key nobody can guess, and the caller is sent
there by a redirect to a presigned GET that expires in minutes and answers the same
Content-Type and Content-Disposition as a direct answer would. The bucket's lifecycle
removes the object within a day. LibreChat's axios follows the redirect, and drops
`Authorization` on the way to the other host.

The bytes reach the bucket from wherever the sandbox is when its backend can send them
itself (AgentCore: the VM's curl to a presigned PUT, no credentials in the VM), else
through this process.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any, BinaryIO

from .errors import Unavailable

# Long enough for a client to follow a redirect and for a VM to PUT a file, and no longer.
URL_SECONDS = 300
KEY_PREFIX = "downloads/"


class LargeFiles:
    def __init__(self, bucket: str, from_bytes: int) -> None:
        # Imported only where a bucket is configured. The client is made at start (so a
        # SnapStart snapshot holds it); on Lambda its credentials refresh by themselves.
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]

        self.bucket = bucket
        self.from_bytes = from_bytes
        self._s3: Any = boto3.client("s3", config=Config(signature_version="s3v4", retries={"mode": "standard"}))

    def is_large(self, size: int) -> bool:
        return size >= self.from_bytes

    def new_key(self) -> str:
        return KEY_PREFIX + secrets.token_urlsafe(24)

    def put_url(self, key: str) -> str:
        """A URL a sandbox PUTs the file to, with no credentials of its own."""
        with _mapped():
            return self._presign("put_object", {"Key": key})

    def store(self, reader: BinaryIO, key: str) -> None:
        with _mapped():
            self._s3.upload_fileobj(reader, self.bucket, key)

    def get_url(self, key: str, content_type: str, disposition: str) -> str:
        params = {"Key": key, "ResponseContentType": content_type, "ResponseContentDisposition": disposition}
        with _mapped():
            return self._presign("get_object", params)

    def _presign(self, method: str, params: dict[str, str]) -> str:
        url = self._s3.generate_presigned_url(method, Params={"Bucket": self.bucket, **params}, ExpiresIn=URL_SECONDS)
        return str(url)


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

    try:
        yield
    except (BotoCoreError, ClientError) as exc:
        raise Unavailable("the storage for large downloads cannot be reached", retry_after=5) from exc
