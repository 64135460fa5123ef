"""What a test reads of an image a run wrote."""

from __future__ import annotations

import struct


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a complete PNG (signature, IHDR first, IEND last)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    width, height = struct.unpack(">II", data[16:24])
    return width, height
