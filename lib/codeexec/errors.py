"""The service's errors: one hierarchy, the HTTP status on the class.

Every layer raises these (a backend maps its own failures into them at its boundary, as
httpx's transports do), and the app answers each with one handler that reads the status,
the error and the details off the exception. `details` never quotes a request body, a
token or a key.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    status: ClassVar[int] = 500
    error: ClassVar[str] = "Internal error"
    #: what the caller is told when the raiser gives no details of its own
    default_details: ClassVar[str] = "the service failed; the failure is logged"

    def __init__(self, details: str | None = None, *, retry_after: int | None = None, reason: str = "") -> None:
        super().__init__(details or self.default_details)
        self.details = details or self.default_details
        self.retry_after = retry_after  # seconds, for errors the caller may retry
        # Why, in one word of a small set, for the metrics and the log line (never sent):
        # which share a 429 passed, which credential a 401 lacked.
        self.reason = reason

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.error, "details": self.details}
        if self.retry_after:
            body["retry_after_seconds"] = self.retry_after  # the field the G2 client reads
        return body

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after else {}


class BadRequest(ServiceError):
    status = 400
    error = "Bad request"
    default_details = "the request is malformed"


class UnsupportedLanguage(BadRequest):
    error = "Unsupported language"


class Unauthorized(ServiceError):
    status = 401
    error = "Unauthorized"
    default_details = "missing or wrong credentials"


class Forbidden(ServiceError):
    status = 403
    error = "Forbidden"
    default_details = "that is another caller's"


class ProfileMismatch(ServiceError):
    """The client expects an execution profile this deployment cannot give (the G2 client
    reads the code in `error` or `code` and tells the model not to retry here)."""

    status = 409
    error = "execution_profile_mismatch"
    default_details = "this deployment's sandboxes keep no stateful workspace"

    def body(self) -> dict[str, Any]:
        return super().body() | {"code": self.error}


class NotFound(ServiceError):
    status = 404
    error = "Not found"
    default_details = "nothing is here"


class SessionNotFound(ServiceError):
    """The session does not exist, has ended, or is not the caller's.

    The three are one error on purpose: a caller must not learn that another tenant's
    session exists, so the details never name the session."""

    status = 404
    error = "Session not found"
    default_details = "no such session for this caller"

    def __init__(self) -> None:
        super().__init__()


class FileNotFound(ServiceError):
    """No such file in the session, or the id leads out of the artifact directory."""

    status = 404
    error = "File not found"
    default_details = "no such file in this session"

    def __init__(self) -> None:
        super().__init__()


class RequestTimeout(ServiceError):
    status = 408
    error = "Request timeout"
    default_details = "the request's body stopped arriving"


class Conflict(ServiceError):
    status = 409
    error = "Conflict"
    default_details = "the request conflicts with the session's state"


class ListingNeeded(ServiceError):
    """A bare file id its session cannot find without a listing (the session's record of
    its files' ids is not whole: a crash cut a run short, or the session is older than the
    record). Never a client's answer: `Sessions` lists the session in the caller's listing
    share and asks again by the file's path."""

    status = 409
    error = "listing_needed"
    default_details = "only a listing of the session finds that file id"


class TooLarge(ServiceError):
    status = 413
    error = "Payload too large"
    default_details = "the request or the file is over its size limit"


class RateLimited(ServiceError):
    """Too many calls at once, of this service or of a cloud API after the client's own
    retries (MicroVM launches: about 5 a second per account): refused at once, with the
    hint the G2 client reads."""

    status = 429
    error = "rate_limited"
    default_details = "too many calls at once; try again shortly"

    def __init__(self, details: str | None = None, *, retry_after: int = 1, reason: str = "") -> None:
        super().__init__(details, retry_after=retry_after, reason=reason)


class Unavailable(ServiceError):
    """Something the service needs cannot serve now; the caller may retry."""

    status = 503
    error = "Service unavailable"
    default_details = "try again later"


class BackendUnavailable(Unavailable):
    error = "Sandbox backend unavailable"


class KeysUnavailable(Unavailable):
    """The token key set cannot be fetched or is unusable, so no token can be checked now."""

    error = "Token keys unavailable"
