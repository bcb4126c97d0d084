"""Bounds on a YAML document checked on its event stream, before any Python object is built.

A YAML alias makes a node appear again wherever it is referenced: ten aliases of ten aliases
of ... build 10**8 values from a few hundred bytes ("billion laughs"), and PyYAML's constructor
builds every one before anything can count them. Deep nesting exhausts the recursion of the
composer and constructor (a 500 RecursionError). So the parser's events are walked first,
iteratively: each anchored node's expanded size and height are remembered, every alias counts
as the whole node it names, and the walk stops at the first value past `MAX_NODES` or the first
collection past `MAX_DEPTH`. Only a document within both is then constructed. The cost is linear
in the text (an alias costs a dictionary look-up), whatever it would expand to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from detlab.expconf._errors import ConfigError
from detlab.expconf._limits import MAX_DEPTH, MAX_NODES, join_path


@dataclass
class _Frame:
    anchor: str | None
    mapping: bool
    nodes: int = 1  # this collection and everything in it, aliases expanded
    height: int = 1  # collection levels from here down, aliases included
    slots: int = 0  # children seen (a mapping's even slots are keys)
    key: Any = None  # a mapping's current key, for the error's path


def _path(stack: list[_Frame]) -> str:
    path = ""
    for frame in stack[:-1] if stack else []:
        if frame.mapping:
            path = join_path(path, frame.key)
        else:
            path = f"{path}[{frame.slots}]"
    return path


def check_yaml_bounds(text: str, loader: type) -> None:
    """Raise ConfigError when `text` would expand past MAX_NODES values or MAX_DEPTH levels.

    Syntax errors are left to the loader that follows (it names line and column).
    """
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded size, height)
    stack: list[_Frame] = []
    total = 0

    def child(nodes: int, height: int, anchor: str | None, key: Any = None) -> None:
        if anchor:
            anchors[anchor] = (nodes, height)
        if not stack:
            return
        top = stack[-1]
        if top.mapping and top.slots % 2 == 0:
            top.key = key
        top.slots += 1
        top.nodes += nodes
        top.height = max(top.height, height + 1)

    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.ScalarEvent):
            total += 1
            child(1, 0, event.anchor, event.value)
        elif isinstance(event, yaml.AliasEvent):
            nodes, height = anchors.get(event.anchor or "", (1, 0))
            total += nodes
            if len(stack) + height > MAX_DEPTH:
                raise ConfigError(
                    _path([*stack, _Frame(None, False)]),
                    f"nested deeper than {MAX_DEPTH} levels (after expanding YAML aliases)",
                )
            child(nodes, height, None)
        elif isinstance(event, yaml.CollectionStartEvent):
            total += 1
            stack.append(_Frame(event.anchor, isinstance(event, yaml.MappingStartEvent)))
            if len(stack) > MAX_DEPTH:
                raise ConfigError(_path(stack), f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            done = stack.pop()
            child(done.nodes, done.height, done.anchor)
        if total > MAX_NODES:
            raise ConfigError(
                f"the config has more than {MAX_NODES:,} values (after expanding YAML aliases)"
            )
