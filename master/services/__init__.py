"""State machines that apply searcher and scheduler decisions to the database.

Every mutation of experiment, trial or allocation state runs under `STATE_LOCK` in its own
transaction: one master process owns the cluster's state, so a process-wide lock is enough and
keeps the transitions free of races on SQLite and PostgreSQL alike. The hot paths (metrics, logs)
do not take it.
"""

import threading

STATE_LOCK = threading.RLock()
