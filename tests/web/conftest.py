"""Fixtures for the web pages: the in-process master (real PostgreSQL) and signed-in browsers."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import CONFIG, app, client, login, submit  # noqa: F401

__all__ = ["CONFIG", "app", "client", "csrf_of", "login", "make_user", "signed_in", "submit"]

CSRF_RE = re.compile(r'name="csrf-token" content="([^"]+)"')


def csrf_of(html: str) -> str:
    m = CSRF_RE.search(html)
    assert m, "page has no CSRF token"
    return m.group(1)


def signed_in(app: Flask, user: str = "admin", pw: str = "admin-password") -> FlaskClient:
    """A fresh browser-like client signed in through the form; `.csrf` holds its token."""
    c = app.test_client()
    page = c.get("/login")
    assert page.status_code == 200
    r = c.post("/login", data={"username": user, "password": pw, "csrf_token": csrf_of(page.text)})
    assert r.status_code == 302, r.text
    home = c.get("/experiments")
    assert home.status_code == 200
    c.csrf = csrf_of(home.text)  # type: ignore[attr-defined]
    return c


def make_user(client: FlaskClient, admin_auth: dict, name: str, admin: bool = False) -> dict:
    r = client.post(
        "/api/v1/users",
        json={"username": name, "password": f"{name}-password", "admin": admin},
        headers=admin_auth,
    )
    assert r.status_code == 201, r.json
    return login(client, name, f"{name}-password")


@pytest.fixture
def admin_auth(client: FlaskClient) -> dict:
    return login(client)
