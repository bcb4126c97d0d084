"""The exception tree every detlab client raises (CLI, TUI, harness, agent).

DetError
├── MasterUnreachable        network failure, master down, timeout
└── APIError                 the master answered with an error (has .status, .code, .path)
    ├── BadRequest           400, validation errors carry the bad field's .path
    ├── Unauthenticated      401
    ├── Forbidden            403
    ├── NotFound             404
    ├── Conflict             409, illegal state transitions
    └── TooLarge             413
"""

from __future__ import annotations


class DetError(Exception):
    """Base of every error a detlab client raises."""


class MasterUnreachable(DetError):
    """The master could not be reached (connection refused, DNS, timeout)."""


class APIError(DetError):
    """The master answered with an error status."""

    def __init__(
        self, status: int, message: str, code: str = "error", path: str | None = None
    ) -> None:
        self.status = status
        self.message = message
        self.code = code
        self.path = path
        # Seconds the master asked us to wait before retrying (a 503's Retry-After), if any.
        self.retry_after: float | None = None
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


class BadRequest(APIError):
    pass


class Unauthenticated(APIError):
    pass


class Forbidden(APIError):
    pass


class NotFound(APIError):
    pass


class Conflict(APIError):
    pass


class TooLarge(APIError):
    pass


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
}


def error_for(status: int, message: str, code: str = "error", path: str | None = None) -> APIError:
    return _BY_STATUS.get(status, APIError)(status, message, code, path)
