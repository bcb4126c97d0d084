"""Look-alike usernames by their UTS #39 skeletons (pure)."""

from __future__ import annotations

import pytest

from master.usernames import _classes, confusable_with, skeleton


@pytest.mark.parametrize(
    ("name", "existing"),
    [
        ("\u0430dmin", "admin"),  # Cyrillic a
        ("Admin", "admin"),  # case
        ("\uff41\uff44\uff4d\uff49\uff4e", "admin"),  # fullwidth
        ("adrnin", "admin"),  # "rn" looks like "m"
        ("admin0", "adminO"),  # digit zero and capital O
        ("adm1n", "admln"),  # digit one and small L
        ("p\u0430yp\u0430l", "paypal"),
    ],
)
def test_look_alikes_collide(name: str, existing: str) -> None:
    assert confusable_with(name, ["alice", existing]) == existing


@pytest.mark.parametrize(
    ("name", "existing"),
    [("user1", "user2"), ("alice", "alicia"), ("admin", "admin_"), ("jo.e", "joe")],
)
def test_different_names_do_not(name: str, existing: str) -> None:
    assert confusable_with(name, [existing]) is None


def test_a_name_is_not_confusable_with_itself() -> None:
    assert confusable_with("admin", ["admin"]) is None


def test_classes_are_represented_by_their_prototype() -> None:
    # A star per prototype, as in confusables.txt: every source maps to its centre.
    rep = _classes([("\u0430", "a"), ("\u03b1", "a"), ("m", "rn"), ("x", "y")])
    assert rep["\u0430"] == rep["\u03b1"] == rep["a"] == "a"
    assert rep["m"] == "rn"  # a pair: the sequence is the prototype
    assert rep["x"] == rep["y"]
    assert skeleton("m") == skeleton("rn")
