"""waitress, told each route's body limit (`master/request_limits.py`): a request whose
Content-Length (or chunked body so far) is over it is answered 413 as soon as its headers are
read, and the connection closed, so the master never receives, spools or parses the rest."""

from __future__ import annotations

import json
from typing import Any

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.utilities import RequestEntityTooLarge

from master.request_limits import BodyLimit, body_limit, has_credentials
from master.web.session import COOKIE_NAME


class _TooLarge(RequestEntityTooLarge):
    """The 413 in the API's error shape (`{"error": {"code", "message"}}`)."""

    def to_response(self, ident: str | None = None) -> tuple[str, list[tuple[str, str]], bytes]:
        body = json.dumps({"error": {"code": "too_large", "message": self.body}}).encode()
        return f"{self.code} {self.reason}", [("Content-Type", "application/json")], body


def limited_channel(max_model_def_bytes: int) -> type[HTTPChannel]:
    """A waitress channel class whose parser refuses over-limit bodies after the headers."""

    class Parser(HTTPRequestParser):
        _limit: BodyLimit | None = None
        error: Any = None  # waitress's own attribute, typed for mypy

        def received(self, data: bytes) -> int:
            consumed: int = super().received(data)
            if self.error is None and self.headers_finished and not self.empty:
                limit = self._limit or self._find_limit()
                sent = max(self.content_length, self.body_bytes_received)
                if sent > limit.bytes:
                    self.error = _TooLarge(limit.message(self.content_length or None))
                    self.completed = True
            return consumed

        def _find_limit(self) -> BodyLimit:
            h: dict[str, Any] = self.headers
            self._limit = body_limit(
                self.command or "",
                self.path or "",
                str(h.get("CONTENT_TYPE", "")),
                has_credentials(h.get("AUTHORIZATION"), h.get("COOKIE"), COOKIE_NAME),
                max_model_def_bytes,
            )
            return self._limit

    class Channel(HTTPChannel):
        parser_class = Parser

    return Channel
