"""AWS event-stream framing (application/vnd.amazon.eventstream), the encoding side.

botocore ships only the decoder. Each message: a prelude (total length, headers length,
both big-endian uint32), the prelude's CRC32, the headers, the payload, and the CRC32 of
everything before it. Every header here is a string (type 7).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any


def message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return body + struct.pack(">I", zlib.crc32(body))


def event(event_type: str, content: dict[str, Any]) -> bytes:
    headers = {":message-type": "event", ":event-type": event_type, ":content-type": "application/json"}
    return message(headers, to_json(content))


def exception(error_type: str, body: dict[str, Any]) -> bytes:
    headers = {":message-type": "exception", ":exception-type": error_type, ":content-type": "application/json"}
    return message(headers, to_json(body))


def to_json(value: Any) -> bytes:
    """JSON as the REST-JSON protocol writes it: blobs in base64."""
    return json.dumps(value, default=lambda b: base64.b64encode(b).decode()).encode()


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack(">B", len(raw_name)) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
