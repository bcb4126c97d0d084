"""The one REST client of detlab, shared by the CLI, the TUI, the harness and the agent."""

from detlab.constants import TERMINAL_STATES
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
from harness.api._retry import (
    OUTAGE_ENV,
    Backoff,
    call_through_outage,
    is_transient,
    outage_from_env,
    retry_call,
)
from harness.api._session import API_PREFIX, Session
from harness.api.client import Client, trial_rung

__all__ = [
    "API_PREFIX",
    "APIError",
    "Backoff",
    "BadRequest",
    "Client",
    "Conflict",
    "DetError",
    "Forbidden",
    "MasterUnreachable",
    "NotFound",
    "OUTAGE_ENV",
    "Session",
    "TERMINAL_STATES",
    "TooLarge",
    "Unauthenticated",
    "call_through_outage",
    "is_transient",
    "outage_from_env",
    "retry_call",
    "trial_rung",
]
