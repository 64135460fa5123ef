"""The fakes' requests and replies held to botocore's service models, as AWS's own are.

botocore validates what a client SENDS, never what it receives: a fake that answers a
null, a missing required member, an undeclared error or a timestamp in another format
would pass every test and meet the first real reply unprepared. So each fake walks every
body it answers through the operation's output shape (or the error's, or the event's)
before it sends it (and each request's body it receives through the input shape), with the
wire rules of the REST-JSON protocol both services speak:

- a structure carries its required members, no member the model lacks, and no null;
  a union exactly one member; members bound to headers never appear in the body;
- strings, numbers and lists keep their enums, lengths, ranges and patterns;
- timestamps are what the shape's format says: ISO 8601 in UTC written with `Z` (as AWS
  writes them) or epoch seconds (REST-JSON's default);
- blobs are base64.

A violation raises ModelViolation, which the fakes turn into a 500 and remember, so the
test that provoked it fails where it happened.
"""

from __future__ import annotations

import base64
import binascii
import re
from functools import cache
from typing import Any

import botocore.session
from botocore.model import OperationModel, ServiceModel, Shape, StructureShape

ISO8601 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
_BODY = (None, "")  # the locations of members that travel in a JSON body


class ModelViolation(AssertionError):
    """A reply AWS would never send: it breaks the service model."""


@cache
def service(name: str) -> ServiceModel:
    return botocore.session.get_session().get_service_model(name)


def operation(service_name: str, name: str) -> OperationModel:
    return service(service_name).operation_model(name)


def check_request(service_name: str, operation_name: str, body: Any) -> None:
    """A request's JSON body as it arrived, against the operation's input shape: botocore
    validates what it sends, and this holds it to the same model on the fake's side."""
    shape = operation(service_name, operation_name).input_shape
    _check(shape, body, operation_name) if shape is not None else _equal(body, {}, operation_name)


def check_reply(service_name: str, operation_name: str, body: Any) -> None:
    """A successful reply's JSON body, against the operation's output shape."""
    shape = operation(service_name, operation_name).output_shape
    if shape is not None and shape.serialization.get("payload"):
        return  # the body is one member's (an event stream): see check_event
    _check(shape, body, operation_name) if shape is not None else _equal(body, {}, operation_name)


def check_event(service_name: str, operation_name: str, event_type: str, payload: Any) -> None:
    """One message of an event-stream reply: an event, or an error the stream declares."""
    stream = operation(service_name, operation_name).get_event_stream_output()
    if stream is None or event_type not in stream.members:
        raise ModelViolation(f"{operation_name}'s stream has no {event_type!r} message")
    _check(stream.members[event_type], payload, f"{operation_name} {event_type}")


def check_error(service_name: str, operation_name: str | None, code: str, status: int, body: Any) -> None:
    """An error reply: one the operation declares (any of the service's for a request that
    names no operation), with its status and its shape's body."""
    if operation_name is None:
        shape = service(service_name).shape_for(code)
    else:
        declared = {shape.name: shape for shape in operation(service_name, operation_name).error_shapes}
        if code not in declared:
            raise ModelViolation(f"{operation_name} never answers {code}; it declares {sorted(declared)}")
        shape = declared[code]
    expected = shape.metadata.get("error", {}).get("httpStatusCode")
    if expected is not None and status != expected:
        raise ModelViolation(f"{code} is status {expected}, not {status}")
    _check(shape, body, code)


def _check(shape: Shape, value: Any, path: str) -> None:
    if value is None:
        raise ModelViolation(f"{path}: null (AWS leaves an absent member out)")
    check = _CHECKS.get(shape.type_name)
    if check is None:
        raise ModelViolation(f"{path}: this checker does not know {shape.type_name} shapes")
    check(shape, value, path)


def _structure(shape: Shape, value: Any, path: str) -> None:
    assert isinstance(shape, StructureShape)
    _is(value, dict, path)
    body = {
        member.serialization.get("name", name): (name, member)
        for name, member in shape.members.items()
        if member.serialization.get("location") in _BODY
    }
    for key in value:
        if key not in body:
            raise ModelViolation(f"{path}: {shape.name} has no member {key!r} (in a body)")
    for name in shape.required_members:
        wire = shape.members[name].serialization.get("name", name)
        if wire in body and wire not in value:
            raise ModelViolation(f"{path}: {shape.name} requires {name!r}")
    if shape.metadata.get("union") and len(value) != 1:
        raise ModelViolation(f"{path}: the union {shape.name} carries exactly one member, not {sorted(value)}")
    for key, item in value.items():
        _check(body[key][1], item, f"{path}.{key}")


def _list(shape: Shape, value: Any, path: str) -> None:
    _is(value, list, path)
    _bounded(shape, len(value), path)
    for index, item in enumerate(value):
        _check(shape.member, item, f"{path}[{index}]")  # type: ignore[attr-defined]


def _map(shape: Shape, value: Any, path: str) -> None:
    _is(value, dict, path)
    _bounded(shape, len(value), path)
    for key, item in value.items():
        _check(shape.key, key, f"{path} key")  # type: ignore[attr-defined]
        _check(shape.value, item, f"{path}[{key!r}]")  # type: ignore[attr-defined]


def _string(shape: Shape, value: Any, path: str) -> None:
    _is(value, str, path)
    enum = shape.metadata.get("enum")
    if enum and value not in enum:
        raise ModelViolation(f"{path}: {value!r} is not one of {enum}")
    _bounded(shape, len(value), path)
    pattern = shape.metadata.get("pattern")
    if pattern and not re.search(pattern, value):  # Smithy patterns are not anchored
        raise ModelViolation(f"{path}: {value!r} does not match {pattern!r}")


def _integer(shape: Shape, value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelViolation(f"{path}: {value!r} is not an integer")
    _bounded(shape, value, path)


def _number(shape: Shape, value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelViolation(f"{path}: {value!r} is not a number")


def _boolean(shape: Shape, value: Any, path: str) -> None:
    _is(value, bool, path)


def _timestamp(shape: Shape, value: Any, path: str) -> None:
    form = shape.serialization.get("timestampFormat") or "unixTimestamp"  # REST-JSON bodies' default
    if form == "iso8601":
        if not (isinstance(value, str) and ISO8601.fullmatch(value)):
            raise ModelViolation(f"{path}: {value!r} is not ISO 8601 in UTC as AWS writes it (…Z)")
    elif form == "unixTimestamp":
        _number(shape, value, path)
    else:
        raise ModelViolation(f"{path}: this checker does not know the {form} format")


def _blob(shape: Shape, value: Any, path: str) -> None:
    _is(value, str, path)
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ModelViolation(f"{path}: a blob travels as base64") from None


_CHECKS = {
    "structure": _structure,
    "list": _list,
    "map": _map,
    "string": _string,
    "integer": _integer,
    "long": _integer,
    "double": _number,
    "float": _number,
    "boolean": _boolean,
    "timestamp": _timestamp,
    "blob": _blob,
}


def _is(value: Any, kind: type, path: str) -> None:
    if not isinstance(value, kind):
        raise ModelViolation(f"{path}: {value!r} is not a {kind.__name__}")


def _bounded(shape: Shape, size: int, path: str) -> None:
    low, high = shape.metadata.get("min"), shape.metadata.get("max")
    if (low is not None and size < low) or (high is not None and size > high):
        raise ModelViolation(f"{path}: {size} is outside {shape.name}'s {low}..{high}")


def _equal(value: Any, expected: Any, path: str) -> None:
    if value != expected:
        raise ModelViolation(f"{path}: expected {expected!r}, got {value!r}")
