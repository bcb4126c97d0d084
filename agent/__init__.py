"""det-agent: runs the master's allocations (trials) on one machine's slots."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("detlab")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.1.0"
