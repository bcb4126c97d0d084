"""How large a request body may be, per route, decided from the request line and headers alone
(pure): so a body over its route's limit is refused before a byte of it is read or parsed.

A route that needs no login takes only a few KB (the login's name and password); a caller
without credentials gets that same small limit everywhere (its answer is a 401 anyway). With
credentials, the model-definition and task-context uploads keep their large limit, the routes
that carry bulk data (metric batches, agents' logs and polls, checkpoint file lists) a larger
one, the routes that carry an experiment config or template a few MB, and everything else
1 MiB. A credential is not checked here (only its presence): a forged one buys at most the
authenticated limit, and is refused before its body is parsed.

Enforced twice from this one table: by waitress's header parser (`master/serve.py`, the 413
goes out before the body is received) and by a before_request hook (`enforce_body_limit`, for
chunked bodies, in-process apps and any other server).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KIB, MIB = 1024, 1024 * 1024

LOGIN_BYTES = 4 * KIB  # POST /api/v1/auth/login: {"username", "password"}
WEB_LOGIN_BYTES = 8 * KIB  # the sign-in form: name, password, CSRF token, next
ANONYMOUS_BYTES = 8 * KIB  # any other request that carries no credentials
DEFAULT_BYTES = 1 * MIB  # users, models, steering, templates' small routes ...
CONFIG_BYTES = 8 * MIB  # an experiment config or template (YAML text in JSON)
BULK_BYTES = 32 * MIB  # metric batches, agents' polls and logs, checkpoint resources
UPLOAD_SLACK = 1 * MIB  # the form fields beside a model definition

_API = "/api/v1"
_CONFIG_ROUTES = re.compile(
    rf"^{_API}/(experiments|experiments/preview|templates/[^/]+|templates/[^/]+/render)$"
)
# A command, notebook or shell started with `--context` (multipart, the directory's .tar.gz).
_CONTEXT_ROUTES = re.compile(rf"^{_API}/(commands|notebooks|shells)$")
_BULK_ROUTES = re.compile(rf"^{_API}/(trials/\d+/metrics|agents/[^/]+/(poll|logs)|checkpoints)$")


@dataclass(frozen=True)
class BodyLimit:
    bytes: int
    what: str  # named in the 413: which limit this is

    def message(self, size: int | None = None) -> str:
        got = f" ({size:,} bytes sent)" if size is not None else ""
        return f"request body too large{got}: at most {self.bytes:,} bytes for {self.what}"


def body_limit(
    method: str, path: str, content_type: str, credentialed: bool, max_model_def_bytes: int
) -> BodyLimit:
    """The largest body this request may carry."""
    method = method.upper()
    if path == f"{_API}/auth/login":
        return BodyLimit(LOGIN_BYTES, "logins")
    if path == "/login":
        return BodyLimit(WEB_LOGIN_BYTES, "sign-in forms")
    if not credentialed:
        return BodyLimit(ANONYMOUS_BYTES, "requests without credentials")
    if (
        method == "POST"
        and path == f"{_API}/experiments"
        and content_type.lower().startswith("multipart/")
    ):
        return BodyLimit(max_model_def_bytes + UPLOAD_SLACK, "model-definition uploads")
    if (
        method == "POST"
        and _CONTEXT_ROUTES.match(path)
        and content_type.lower().startswith("multipart/")
    ):
        # The same limit as a model definition: Determined's one limit on a context.
        return BodyLimit(max_model_def_bytes + UPLOAD_SLACK, "task context uploads")
    if _BULK_ROUTES.match(path):
        return BodyLimit(BULK_BYTES, f"{method} {path}")
    if _CONFIG_ROUTES.match(path):
        return BodyLimit(CONFIG_BYTES, "experiment configs and templates")
    return BodyLimit(DEFAULT_BYTES, f"{method} {path}")


def largest_body(max_model_def_bytes: int) -> int:
    """What any request may carry at most (the server's own hard cap)."""
    return max(max_model_def_bytes + UPLOAD_SLACK, BULK_BYTES, CONFIG_BYTES)


def has_credentials(authorization: str | None, cookie: str | None, cookie_name: str) -> bool:
    """A bearer token or a web session cookie is present (not whether it is valid)."""
    return bool(authorization) or bool(cookie and f"{cookie_name}=" in cookie)
