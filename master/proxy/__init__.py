"""The master's reverse proxy to interactive tasks (notebooks, shells, TensorBoards):
`/proxy/<task_id>/...`, HTTP and WebSocket, on an aiohttp listener beside waitress.

access.py decides who may reach which task and where it listens (through the database, in a
Flask app context); activity.py remembers when each task was last used; server.py carries the
bytes. docs/notebooks.md tells the story; docs/architecture.md why aiohttp.
"""
