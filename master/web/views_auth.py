"""Sign in and out."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from master.errors import TooManyRequests
from master.web.blueprint import bp, safe_next
from master.web.session import current_user, sign_in, sign_out


@bp.get("/")
def index() -> ResponseReturnValue:
    return redirect(url_for("web.experiments"))


@bp.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    nxt = request.values.get("next")
    if request.method == "GET":
        if current_user() is not None:
            return redirect(safe_next(nxt))
        return render_template("login.html", next=nxt or "", username="", error=None)
    username = (request.form.get("username") or "").strip()
    password = request.form.get("password") or ""
    try:
        signed_in = bool(username) and sign_in(username, password) is not None
    except TooManyRequests as e:
        page = render_template("login.html", next=nxt or "", username=username, error=e.message)
        return page, 429, {"Retry-After": str(e.retry_after)}
    if not signed_in:
        return (
            render_template(
                "login.html", next=nxt or "", username=username, error="Wrong username or password."
            ),
            401,
        )
    return redirect(safe_next(nxt))


@bp.post("/logout")
def logout() -> ResponseReturnValue:
    sign_out()
    flash("Signed out.")
    return redirect(url_for("web.login"))
