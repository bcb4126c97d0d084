"""The per-route body limits and the deep-JSON path scan (pure)."""

from __future__ import annotations

import json

import pytest

from master.jsoncheck import path_at_depth
from master.request_limits import (
    ANONYMOUS_BYTES,
    BULK_BYTES,
    CONFIG_BYTES,
    DEFAULT_BYTES,
    LOGIN_BYTES,
    UPLOAD_SLACK,
    WEB_LOGIN_BYTES,
    body_limit,
    has_credentials,
    largest_body,
)

MODEL_DEF = 96 << 20


@pytest.mark.parametrize(
    ("method", "path", "ctype", "cred", "want"),
    [
        ("POST", "/api/v1/auth/login", "application/json", False, LOGIN_BYTES),
        ("POST", "/api/v1/auth/login", "application/json", True, LOGIN_BYTES),
        ("POST", "/login", "application/x-www-form-urlencoded", False, WEB_LOGIN_BYTES),
        ("POST", "/api/v1/experiments", "multipart/form-data; b=x", False, ANONYMOUS_BYTES),
        ("POST", "/api/v1/experiments", "multipart/form-data; b=x", True, MODEL_DEF + UPLOAD_SLACK),
        ("POST", "/api/v1/experiments", "application/json", True, CONFIG_BYTES),
        ("POST", "/api/v1/experiments/preview", "application/json", True, CONFIG_BYTES),
        ("PUT", "/api/v1/templates/t", "application/json", True, CONFIG_BYTES),
        ("POST", "/api/v1/templates/t/render", "application/json", True, CONFIG_BYTES),
        ("POST", "/api/v1/trials/7/metrics", "application/json", True, BULK_BYTES),
        ("POST", "/api/v1/agents/a-1/poll", "application/json", True, BULK_BYTES),
        ("POST", "/api/v1/agents/a-1/logs", "application/json", True, BULK_BYTES),
        ("POST", "/api/v1/checkpoints", "application/json", True, BULK_BYTES),
        ("PATCH", "/api/v1/users/bob", "application/json", True, DEFAULT_BYTES),
        ("POST", "/api/v1/models", "application/json", True, DEFAULT_BYTES),
        ("POST", "/api/v1/models", "application/json", False, ANONYMOUS_BYTES),
        ("POST", "/experiments/3/kill", "application/x-www-form-urlencoded", True, DEFAULT_BYTES),
    ],
)
def test_each_route_has_its_limit(
    method: str, path: str, ctype: str, cred: bool, want: int
) -> None:
    limit = body_limit(method, path, ctype, cred, MODEL_DEF)
    assert limit.bytes == want
    assert f"at most {want:,} bytes" in limit.message(want + 1)
    assert limit.bytes <= largest_body(MODEL_DEF)


def test_credentials_are_a_bearer_header_or_the_session_cookie() -> None:
    assert has_credentials("Bearer x", None, "detlab_session")
    assert has_credentials(None, "a=1; detlab_session=abc", "detlab_session")
    assert not has_credentials(None, "other=1", "detlab_session")
    assert not has_credentials(None, None, "detlab_session")


def test_the_path_of_too_deep_json_is_found_without_parsing_it() -> None:
    doc = '{"a": [1, {"b\\"c": ' + "[" * 5000 + "]" * 5000 + "}]}"
    assert path_at_depth(doc, 64) == 'a[1].b"c' + "[0]" * 61
    assert path_at_depth(json.dumps({"x": [[1], [2, [3]]]}), 3) == "x[1][1]"
    assert path_at_depth('{"s": "[[[[[[ {{{{", "t": 1}', 2) is None  # brackets in strings
