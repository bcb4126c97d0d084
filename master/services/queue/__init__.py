"""The scheduling pass and the job queue people see."""
