"""detlab benchmarks: `python bench/run.py [NAME ...]` (see bench/README.md)."""
