"""The one error type of config validation: it carries the dotted path of the bad field."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config is invalid; `path` names the bad field (`""` for the whole document).

    `ConfigError(path, message)`, or `ConfigError(message)` for a document-level error.
    `str(err)` is `"path: message"`, the form the API, the CLI and the docs show.
    """

    path: str
    message: str

    def __init__(self, path: str, message: str | None = None) -> None:
        if message is None:
            path, message = "", path
        super().__init__(path, message)  # args round-trip through pickle
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message
