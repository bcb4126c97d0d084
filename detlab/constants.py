"""Facts every detlab process agrees on, kept in one place."""

from __future__ import annotations

# Where the CLI, det-tui and det-agent look for the master unless told (DET_MASTER, -m).
DEFAULT_MASTER_URL = "http://127.0.0.1:8080"

# Experiment and trial states that never change again.
TERMINAL_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR"})

# The master's default limit on a model definition (a gzipped tar of the model directory).
MAX_MODEL_DEF_BYTES = 96 * 1024 * 1024
