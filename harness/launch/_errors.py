"""Show a failing trial's traceback as the user's: harness frames are left out."""

from __future__ import annotations

import traceback
import types
from pathlib import Path

import harness

_HARNESS = str(Path(harness.__file__).resolve().parent)


def _is_internal(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    try:
        return str(Path(filename).resolve()).startswith(_HARNESS + "/")
    except OSError:
        return False


def _trim(tb: types.TracebackType | None) -> types.TracebackType | None:
    keep = []
    t = tb
    while t is not None:
        if not _is_internal(t.tb_frame.f_code.co_filename):
            keep.append(t)
        t = t.tb_next
    if not keep:
        return tb  # a harness bug: show everything
    new: types.TracebackType | None = None
    for t in reversed(keep):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new


def user_traceback(exc: BaseException) -> str:
    """The traceback of `exc` (and its causes) with the harness's own frames removed."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = _trim(e.__traceback__)
        e = e.__cause__ or e.__context__
    return "".join(traceback.format_exception(exc))
