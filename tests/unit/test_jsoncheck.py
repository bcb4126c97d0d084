"""The request gate's pure check of a parsed JSON document (master/jsoncheck.py)."""

from __future__ import annotations

from typing import Any

import pytest

from detlab.text import bad_text, clean_text
from master.errors import BadRequest
from master.jsoncheck import check_json


def _deep(n: int) -> Any:
    value: Any = 0
    for _ in range(n):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("doc", "path", "fragment"),
    [
        ({"username": "a\x00"}, "username", "NUL"),
        ({"logs": [{"line": "x"}, {"line": "\udc80"}]}, "logs[1].line", "surrogate"),
        ({"metadata": {"k\x00": 1}}, "metadata.k\ufffd", "key"),
        ({"weight": float("inf")}, "weight", "finite"),
        ({"n": [2**63]}, "n[0]", "64 bits"),
        (_deep(65), "a" + ".a" * 63, "nested deeper than 64"),
        ("\x00", None, "NUL"),
    ],
)
def test_what_cannot_be_stored_is_named(doc: Any, path: str | None, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        check_json(doc)
    assert info.value.path == path
    assert fragment in info.value.message


def test_sanitising_repairs_strings_and_keys_in_place() -> None:
    doc = {"logs": [{"line": "a\x00b\ud800"}], "k\x00": "v"}
    assert check_json(doc, sanitise=True) == {"logs": [{"line": "a\ufffdb\ufffd"}], "k\ufffd": "v"}


def test_what_can_be_stored_passes_untouched() -> None:
    doc = {"a": [1, -(2**63), 2**63 - 1, 1.5, True, None, "ünïcode ✓ \U0001f600"], "b": _deep(60)}
    assert check_json(doc) is doc
    assert bad_text("fine") is None and clean_text("fine") == "fine"
