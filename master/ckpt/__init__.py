"""Checkpoint lifecycle on the master: the GC keep rule (pure), deletion states, the GC job."""
