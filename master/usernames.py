"""Look-alike usernames: Unicode skeletons in the manner of UTS #39 (pure).

Two names are confusable when their skeletons match: a Cyrillic "аdmin" and "admin", "adminO" and
"admin0", or (after case folding) "Admin" and "admin". The skeleton follows UTS #39 section 4:
decompose (NFKD here, so fullwidth and other compatibility forms fold too), replace each character
by the prototype of its confusable class, decompose again.

The classes come from Unicode's confusables.txt as shipped (and kept current) by the
`confusable_homoglyphs` package. It stores the table as a two-way map of homoglyphs, which loses
which side of each line is the prototype; a skeleton only needs one stable representative per
class, so each class (a connected group of the map) is represented by its centre: the prototype
that the other members map to.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable

# Marks confusables.txt wraps right-to-left characters in for display; not part of the characters.
_DISPLAY_MARKS = str.maketrans("", "", "\u200e\u200f")


def _classes(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each member of a confusable class -> the class's representative (pure)."""
    parent: dict[str, str] = {}
    degree: dict[str, int] = {}

    def find(x: str) -> str:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for a, b in pairs:
        if a == b:
            continue
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    members: dict[str, list[str]] = {}
    for x in parent:
        members.setdefault(find(x), []).append(x)
    rep: dict[str, str] = {}
    for group in members.values():
        # The prototype is what the others map to: the member with the most links; in a pair,
        # a sequence ("rn" for "m") is the prototype since sources are single characters.
        centre = max(group, key=lambda m: (degree.get(m, 0), len(m), -ord(m[0])))
        for m in group:
            rep[m] = centre
    return rep


@functools.cache
def _table() -> dict[str, str]:
    """Single character -> its class's representative (only where they differ). Read-only."""
    from confusable_homoglyphs.confusables import confusables_data

    pairs = []
    for char, glyphs in confusables_data.items():
        a = char.translate(_DISPLAY_MARKS)
        for glyph in glyphs:
            b = glyph["c"].translate(_DISPLAY_MARKS)
            if a and b:
                pairs.append((a, b))
    return {m: r for m, r in _classes(pairs).items() if len(m) == 1 and m != r}


def skeleton(name: str) -> str:
    table = _table()
    s = unicodedata.normalize("NFKD", name)
    for _ in range(4):  # a prototype sequence's own characters may map again (bounded)
        mapped = unicodedata.normalize("NFKD", "".join(table.get(c, c) for c in s))
        if mapped == s:
            break
        s = mapped
    return s


def skeletons(name: str) -> tuple[str, str]:
    """The name's skeleton as written, and of its case-folded form."""
    return skeleton(name), skeleton(unicodedata.normalize("NFKD", name).casefold())


def confusable_with(name: str, existing: Iterable[str]) -> str | None:
    """The first existing name that `name` could be mistaken for (not itself), or None."""
    raw, folded = skeletons(name)
    for other in existing:
        if other == name:
            continue
        other_raw, other_folded = skeletons(other)
        if raw == other_raw or folded == other_folded:
            return other
    return None
