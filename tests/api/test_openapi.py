"""The OpenAPI description matches the routes: none missing, no phantom, served to anyone."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from flask import Flask
from openapi_spec_validator import validate

from master.api.openapi import build_spec, described_operations


@pytest.fixture
def bare_app(tmp_path: Path) -> Flask:
    """The master's app, built only (no database is touched)."""
    from master.app import create_app
    from master.config import MasterConfig

    return create_app(
        MasterConfig(db="postgresql://nobody@127.0.0.1:1/none", data_dir=tmp_path / "data")
    )


def routed_operations(app: Flask) -> set[tuple[str, str]]:
    """(METHOD, path with {param}s) for every /api/v1 route Flask answers."""
    ops = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/"):
            continue
        path = re.sub(r"<(?:[a-z]+:)?([a-zA-Z_]\w*)>", r"{\1}", rule.rule)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                ops.add((method, path))
    return ops


def test_every_route_is_described_and_nothing_else(bare_app: Flask) -> None:
    routed = routed_operations(bare_app)
    described = described_operations(build_spec())
    assert len(routed) > 60  # the walk found the API, not an empty map
    assert not routed - described, (
        f"routes missing from master/api/openapi.yaml: {routed - described}"
    )
    assert not described - routed, f"described but not routed (phantom): {described - routed}"


def test_the_description_is_valid_openapi_3() -> None:
    validate(build_spec())  # raises naming the first problem


def test_path_parameters_are_the_routes_own() -> None:
    """Each operation declares exactly the {params} of its path (schemathesis fills them in)."""
    spec = build_spec()
    for path, item in spec["paths"].items():
        wanted = set(re.findall(r"{(\w+)}", path))
        for method, op in item.items():
            if method == "parameters":
                continue
            params = [*item.get("parameters", []), *op.get("parameters", [])]
            names = {_resolve(spec, p)["name"] for p in params if _resolve(spec, p)["in"] == "path"}
            assert names == wanted, f"{method.upper()} {path}: path parameters {names}"


def _resolve(spec: dict, param: dict) -> dict:
    ref = param.get("$ref")
    if ref is None:
        return param
    node = spec
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def test_served_as_json_without_a_token(bare_app: Flask) -> None:
    r = bare_app.test_client().get("/api/v1/openapi.json")
    assert r.status_code == 200
    assert r.mimetype == "application/json"
    body = r.get_json()
    assert body == build_spec()
    assert body["openapi"].startswith("3.")
    assert body["components"]["securitySchemes"]["userToken"]["scheme"] == "bearer"
    login = body["paths"]["/auth/login"]["post"]
    assert login["security"] == []  # public, as the route is
    assert login["responses"]["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }


def test_a_phantom_or_a_missing_route_is_caught(bare_app: Flask) -> None:
    """The comparison itself notices both directions (guards the test against going vacuous)."""
    spec = build_spec()
    spec["paths"]["/experiments/nonexistent"] = {"post": {"responses": {}}}
    del spec["paths"]["/health"]
    routed, described = routed_operations(bare_app), described_operations(spec)
    assert described - routed == {("POST", "/api/v1/experiments/nonexistent")}
    assert routed - described == {("GET", "/api/v1/health")}


DOC_ROUTE = re.compile(
    r"`((?:GET|POST|PUT|PATCH|DELETE)(?:\|(?:GET|POST|PUT|PATCH|DELETE))*) (/[^`\s]*)"
)


def _shape(path: str) -> str:
    """A path with its query, optional parts and parameter names dropped: /a/{}/b."""
    path = re.split(r"[?\[]", path, maxsplit=1)[0]
    return re.sub(r"{[^}]*}", "{}", path.removeprefix("/api/v1")).rstrip("/")


def _expand(path: str) -> list[str]:
    """`/models/{}/archive|unarchive` (docs shorthand) -> both paths."""
    return ["/".join(p) for p in itertools.product(*(seg.split("|") for seg in path.split("/")))]


def _matches(documented: str, described: str) -> bool:
    """Segment by segment; a described {} (e.g. {action}) takes any segment."""
    doc, spec = documented.split("/"), described.split("/")
    return len(doc) == len(spec) and all(s in ("{}", d) for d, s in zip(doc, spec, strict=True))


def test_every_route_docs_api_md_names_is_described() -> None:
    """docs/api.md may not document a route the master does not have (a phantom in the docs)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    described = {(m, _shape(p)) for m, p in described_operations(build_spec())}
    documented = {
        (method, one)
        for methods, path in DOC_ROUTE.findall(text)
        for method in methods.split("|")
        for one in _expand(_shape(path))
    }
    assert len(documented) > 40
    phantoms = {
        (method, path)
        for method, path in documented
        if not any(m == method and _matches(path, p) for m, p in described)
    }
    assert not phantoms, f"in docs/api.md but not routed: {phantoms}"


def test_free_text_limits_are_the_masters_own() -> None:
    """The description states the limits master/field_limits.py enforces, and every request
    body's free-text field refers to them (issue 37)."""
    from master import field_limits as fl

    spec = build_spec()
    schemas = spec["components"]["schemas"]
    assert schemas["Description"]["maxLength"] == fl.MAX_DESCRIPTION
    assert schemas["Notes"]["maxLength"] == fl.MAX_NOTES
    assert schemas["Labels"]["maxItems"] == fl.MAX_LABELS
    assert schemas["Labels"]["items"]["maxLength"] == fl.MAX_LABEL
    refs = {"description": "Description", "comment": "Description", "notes": "Notes"}
    refs["labels"] = "Labels"
    seen = 0
    for path, item in spec["paths"].items():
        for method, op in item.items():
            body = (op.get("requestBody") or {}) if isinstance(op, dict) else {}
            schema = body.get("content", {}).get("application/json", {}).get("schema", {})
            for name, prop in (schema.get("properties") or {}).items():
                if name in refs:
                    seen += 1
                    want = f"#/components/schemas/{refs[name]}"
                    assert prop.get("$ref") == want, (method, path, name, prop)
                if name == "password" and path != "/auth/login":  # a new password
                    assert prop.get("maxLength") == fl.MAX_PASSWORD, (method, path)
    assert seen >= 8
