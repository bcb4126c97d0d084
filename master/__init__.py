"""The detlab master: REST API, state machines, searcher and scheduler."""

__version__ = "0.1.0"
