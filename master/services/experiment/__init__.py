"""Experiments: submission, state changes, edits, listings, model definitions,
templates, the searcher's operations."""
