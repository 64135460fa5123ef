"""An upload's multipart body, parsed as it arrives (python-multipart's streaming parser).

Starlette's `request.form()` reads the whole body first, spooling every file over 1 MB to
the host's /tmp, where no session's quota bounds it. Here the body is read only once the
caller holds an upload slot, a part at a time, from the worker thread that stores it, and
each file part is a reader the session writes straight into its own directory: no byte
of an upload lands anywhere else.

Every client sends its form fields (G1's `entity_id`; G2's `kind`, `id`, `version`,
`read_only`) before its files, so they are known when the first file arrives; a field
after a file is refused, and so is a part past the 200th file (413, `filesLimitReached`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from ..errors import BadRequest, TooLarge
from ..streams import ChunkReader

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FILE_FIELDS = frozenset({"file", "files"})  # the parts that are files to store
MAX_FILES = 200  # parts after the fields, at most: the reference server's batch limit
_CHUNK = 1 << 16
_FIELD_BYTES = 4096  # a field's value at most: the clients send ids and words
_FIELDS = 64  # fields in a form at most
_END = b""  # the event that ends a part's data (a data event is never empty)


def fields_then_files(content_type: str, body: ChunkReader) -> tuple[dict[str, str], Iterator[tuple[str, BinaryIO]]]:
    """The form's fields, read up to its first file; then its files, lazily, each a
    reader to be read to its end before the next is asked for."""
    parts = Form(content_type, body).parts()
    fields: dict[str, str] = {}
    first = None
    for part in parts:
        if part.is_file:
            first = part
            break
        if part.filename is None:
            fields[part.name] = part.text()
            if len(fields) > _FIELDS:
                raise BadRequest(f"the form has more than {_FIELDS} fields")

    def files() -> Iterator[tuple[str, BinaryIO]]:
        part = first
        count = 0
        while part is not None:
            count += 1
            if count > MAX_FILES:  # refused at once, before any more of the body is read
                raise TooManyFiles(f"an upload takes at most {MAX_FILES} files")
            if part.is_file:
                assert part.filename is not None
                yield part.filename, cast(BinaryIO, part)
            elif part.filename is None:
                raise BadRequest("the form's fields must come before its files")
            part = next(parts, None)

    return fields, files()


class TooManyFiles(TooLarge):
    """Answered as the reference server answers a batch over its limit."""

    def body(self) -> dict[str, Any]:
        return super().body() | {"filesLimitReached": True, "maxFiles": MAX_FILES}


class Form:
    """A multipart/form-data body, its parts in order, read as they are asked for."""

    def __init__(self, content_type: str, body: ChunkReader) -> None:
        kind, options = parse_options_header(content_type)
        if kind != b"multipart/form-data" or not options.get(b"boundary"):
            raise BadRequest("an upload is a multipart/form-data body")
        self._body = body
        self._events: deque[bytes | dict[bytes, bytes]] = deque()  # a part's headers, its data, _END
        self._done = False
        self._closed = False  # its last boundary came: a body that ends before it is cut short
        headers: dict[bytes, bytes] = {}
        field: list[bytes] = []

        def header_value(data: bytes, start: int, end: int) -> None:
            name = b"".join(field).lower()
            headers[name] = headers.get(name, b"") + data[start:end]

        def headers_done() -> None:
            self._events.append(dict(headers))
            headers.clear()

        callbacks: MultipartCallbacks = {
            "on_header_field": lambda data, start, end: field.append(data[start:end]),
            "on_header_value": header_value,
            "on_header_end": field.clear,
            "on_headers_finished": headers_done,
            "on_part_data": lambda data, start, end: self._events.append(data[start:end]) if end > start else None,
            "on_part_end": lambda: self._events.append(_END),
            "on_end": lambda: setattr(self, "_closed", True),
        }
        self._parser = MultipartParser(options[b"boundary"], callbacks)

    def parts(self) -> Iterator[Part]:
        while (headers := self._next()) is not None:
            assert isinstance(headers, dict)  # the part before was read to its end
            _, options = parse_options_header(headers.get(b"content-disposition"))
            filename = options.get(b"filename")
            part = Part(self, _text(options.get(b"name", b"")), None if filename is None else _text(filename))
            yield part
            part.skip()  # to its end, whatever the caller read of it

    def data(self) -> bytes:
        """The current part's next bytes; b"" at its end."""
        event = self._next()
        return event if isinstance(event, bytes) else _END

    def _next(self) -> bytes | dict[bytes, bytes] | None:
        while not self._events and not self._done:
            chunk = self._body.read(_CHUNK)
            try:
                if chunk:
                    self._parser.write(chunk)
                else:
                    self._parser.finalize()
                    self._done = True
            except MultipartParseError:
                raise BadRequest("the multipart form is malformed") from None
        if self._done and not self._closed:  # else a file cut short would be stored as whole
            raise BadRequest("the multipart form ends before its last boundary")
        return self._events.popleft() if self._events else None


class Part(ChunkReader):
    """One part of a form; a file part is read as a file."""

    def __init__(self, form: Form, name: str, filename: str | None) -> None:
        super().__init__(form.data)
        self.name = name
        self.filename = filename

    @property
    def is_file(self) -> bool:
        return self.filename is not None and self.name in FILE_FIELDS

    def skip(self) -> None:
        while self.read(_CHUNK):
            pass

    def text(self) -> str:
        value = self.read(_FIELD_BYTES + 1)
        if len(value) > _FIELD_BYTES:
            raise BadRequest(f"a form field is longer than {_FIELD_BYTES} bytes")
        return _text(value)


def _text(raw: bytes) -> str:
    # parse_options_header hands back the header's bytes; clients send UTF-8 (Starlette reads it so too).
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
