"""The messages screens post; they bubble up to the app, which acts on them.

Screens say what happened or what they want (open a view, show a toast, the master answered or
not, something changed on the master) and never call into the app. Messages carrying a screen's
own data (rows built in its worker) are declared in that screen's module.
"""

from __future__ import annotations

from textual.message import Message


class OpenView(Message):
    """Open a view (`queue`, `exps`, `exp`, `trial`, `logs`, `gpu`, `agents`, `models`)."""

    def __init__(self, view: str, ident: int | str | None = None) -> None:
        super().__init__()
        self.view = view
        self.ident = ident


class Toast(Message):
    """A toast for the user (an action's result or an error)."""

    def __init__(self, text: str, error: bool = False) -> None:
        super().__init__()
        self.text = text
        self.error = error


class MasterStatus(Message):
    """The master answered (`error` None) or could not be reached (`error` says why)."""

    def __init__(self, error: str | None = None) -> None:
        super().__init__()
        self.error = error


class MasterChanged(Message):
    """An action changed something on the master: refresh the app-wide data now."""
