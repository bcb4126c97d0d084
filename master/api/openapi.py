"""The OpenAPI description of the REST API: `openapi.yaml` (the one source), served as JSON.

The YAML describes each operation; `build_spec` adds what every operation shares (the default
user-token security is the document's own; the common error responses are added here) so the
file states each thing once. `tests/api/test_openapi.py` keeps it equal to the Flask routes.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml
from flask import Blueprint, Response

SPEC_PATH = Path(__file__).with_name("openapi.yaml")
HTTP_METHODS = ("get", "put", "post", "patch", "delete")

# Every operation may answer these; each has the `Error` body (see master/errors.py).
COMMON_ERRORS = {
    "400": "bad input: `path` names the field",
    "401": "missing, unknown or expired token",
    "403": "the token may not do this",
    "404": "no such resource",
    # Flask answers 405 where a path matches another method's route (e.g. a non-integer version).
    "405": "the path exists for other methods",
    "409": "the resource's state forbids it (an illegal transition, a duplicate)",
    "413": "the body is over the master's limit",
    "503": "the database is unavailable for a moment: retry",
}

bp = Blueprint("openapi", __name__)


def build_spec(text: str | None = None) -> dict[str, Any]:
    """The full OpenAPI document (a fresh dict each call)."""
    spec = yaml.safe_load(SPEC_PATH.read_text() if text is None else text)
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for item in spec["paths"].values():
        for method in HTTP_METHODS:
            op = item.get(method)
            if op is None:
                continue
            responses = op.setdefault("responses", {})
            for status, why in COMMON_ERRORS.items():
                responses.setdefault(status, {"description": why, "content": error})
    return spec


def described_operations(spec: dict[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, /api/v1 path with {param}s) for every operation the document describes."""
    base = spec["servers"][0]["url"].rstrip("/")
    return {
        (method.upper(), base + path)
        for path, item in spec["paths"].items()
        for method in HTTP_METHODS
        if method in item
    }


@functools.cache
def _spec_bytes() -> bytes:
    # The file never changes while the master runs: serialise it once (immutable bytes).
    return json.dumps(build_spec(), separators=(",", ":")).encode()


@bp.get("/openapi.json")
def openapi_json() -> Response:
    return Response(_spec_bytes(), mimetype="application/json")
