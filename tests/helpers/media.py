"""Reading what a run made, by the formats' own structure and not by the tools that made
it: an MP4's boxes, an MP3's frames, a GIF's frames."""

from __future__ import annotations

import struct
from collections.abc import Iterator


def mp4_boxes(data: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[str, bytes]]:
    """The boxes between start and end, each as (type, payload)."""
    end = len(data) if end is None else end
    while start + 8 <= end:
        size, kind = struct.unpack(">I4s", data[start : start + 8])
        header = 8
        if size == 1:  # a 64-bit size follows the type
            size, header = struct.unpack(">Q", data[start + 8 : start + 16])[0], 16
        elif size == 0:  # to the end of the file
            size = end - start
        if size < header or start + size > end:
            raise ValueError(f"box {kind!r} at {start} overruns its parent")
        yield kind.decode("latin-1"), data[start + header : start + size]
        start += size


def mp4_box(data: bytes, *path: str) -> bytes:
    """The payload of the first box along path (moov, trak, mdia, ...)."""
    for kind in path:
        data = next(payload for found, payload in mp4_boxes(data) if found == kind)
    return data


def mp4_video_frames(data: bytes) -> int:
    """The sample count of the first video track (its stsz box)."""
    moov = mp4_box(data, "moov")
    for kind, trak in mp4_boxes(moov):
        if kind == "trak" and mp4_box(trak, "mdia", "hdlr")[8:12] == b"vide":
            stsz = mp4_box(trak, "mdia", "minf", "stbl", "stsz")
            return int(struct.unpack(">I", stsz[8:12])[0])
    raise ValueError("no video track")


_MP3_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_MP3_RATES = (44100, 48000, 32000)


def mp3_frames(data: bytes) -> list[tuple[int, int]]:
    """The MPEG-1 Layer III frames, back to back from the first to the last (after an ID3v2
    tag, before an ID3v1 one), each as (kbit/s, sample rate); anything else raises."""
    at = 0
    if data[:3] == b"ID3":  # the tag's size is four 7-bit bytes
        at = 10 + sum((byte & 0x7F) << (7 * (3 - i)) for i, byte in enumerate(data[6:10]))
    end = len(data) - 128 if data[-128:-125] == b"TAG" else len(data)
    frames = []
    while at < end:
        header = int.from_bytes(data[at : at + 4], "big")
        if header >> 21 != 0x7FF or (header >> 17) & 0xF != 0b1101:  # sync, MPEG-1, Layer III
            raise ValueError(f"no MP3 frame at byte {at} of {end}")
        kbps, rate = _MP3_KBPS[(header >> 12) & 0xF], _MP3_RATES[(header >> 10) & 0x3]
        frames.append((kbps, rate))
        at += 144 * kbps * 1000 // rate + ((header >> 9) & 1)
    if at != end:
        raise ValueError("the last MP3 frame is cut short")
    return frames


def gif_frames(data: bytes) -> int:
    """The images of a GIF, walked block by block to its trailer."""
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        raise ValueError("not a GIF")
    at = 13
    if data[10] & 0x80:  # a global colour table
        at += 3 << ((data[10] & 7) + 1)
    frames = 0
    while data[at] != 0x3B:
        if data[at] == 0x21:  # an extension: its label, then sub-blocks
            at += 2
        elif data[at] == 0x2C:  # an image: descriptor, local colour table, LZW code size
            flags = data[at + 9]
            at += 10 + ((3 << ((flags & 7) + 1)) if flags & 0x80 else 0) + 1
            frames += 1
        else:
            raise ValueError(f"unknown GIF block {data[at]:#x} at {at}")
        while data[at]:  # sub-blocks up to the empty one
            at += data[at] + 1
        at += 1
    return frames
