"""Shells on the cluster (`det shell`): `server` runs in the task (a pseudo-terminal per
WebSocket, behind the master's proxy), `client` bridges the user's terminal to it, and
`protocol` is what both say to each other."""
