"""Checkpoints: registration and state."""
