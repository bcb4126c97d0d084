"""Agents: their polls (registration, heartbeat, work), credentials, Unix identities, listings."""
