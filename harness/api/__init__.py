"""The one REST client of detlab, shared by the CLI, the TUI, the harness and the agent."""

from harness.api._errors import (
    APIError,
    BadRequest,
    Conflict,
    DetError,
    Forbidden,
    MasterUnreachable,
    NotFound,
    TooLarge,
    Unauthenticated,
)
from harness.api._session import Session
from harness.api.client import TERMINAL_STATES, Client

__all__ = [
    "APIError",
    "BadRequest",
    "Client",
    "Conflict",
    "DetError",
    "Forbidden",
    "MasterUnreachable",
    "NotFound",
    "Session",
    "TERMINAL_STATES",
    "TooLarge",
    "Unauthenticated",
]
