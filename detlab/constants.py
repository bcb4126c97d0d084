"""Facts every detlab process agrees on, kept in one place."""

from __future__ import annotations

# Experiment and trial states that never change again (defined with the states themselves).
from detlab.states import TERMINAL_STATES as TERMINAL_STATES

# Where the CLI, det-tui and det-agent look for the master unless told (DET_MASTER, -m).
DEFAULT_MASTER_URL = "http://127.0.0.1:8080"

# The master's default limit on a model definition (a gzipped tar of the model directory).
MAX_MODEL_DEF_BYTES = 96 * 1024 * 1024

# The file a Slurm job's launcher (agent/slurm_job.py) leaves in its job directory when Slurm
# sends the job USR1 (preemption or time limit); the master's Slurm RM reads it.
SLURM_NOTICE_FILE = "preempt_notice"
