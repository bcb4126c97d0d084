"""`/proxy/<task_id>/...` on the master's own port: a signed-in browser is sent on to the
proxy's listener (master/proxy, its own port: waitress cannot carry WebSockets), so a
notebook's link can name the master's usual address. The sign-in gate comes first, as for
every page, and the proxy checks the session again itself."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import abort, redirect, request
from flask.typing import ResponseReturnValue

from master.context import master_state
from master.web.blueprint import bp


@bp.get("/proxy/<task_id>/")
@bp.get("/proxy/<task_id>/<path:rest>")
def to_proxy(task_id: str, rest: str = "") -> ResponseReturnValue:
    port = master_state().proxy.port
    if not port:  # an app that serves no proxy (tests that only build the app)
        abort(404)
    host = urlsplit(request.host_url).hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    query = request.query_string.decode("latin-1")
    target = f"{request.scheme}://{host}:{port}/proxy/{task_id}/{rest}"
    return redirect(target + (f"?{query}" if query else ""), 307)
