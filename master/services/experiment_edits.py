"""Editing an experiment's metadata (Determined's `det experiment set ...` and `label ...`)."""

from __future__ import annotations

from typing import Any

from detlab.expconf import limits
from master.context import state_lock
from master.db import db
from master.errors import BadRequest
from master.models import Experiment
from master.services.experiments import get_experiment

EDITABLE = ("name", "description", "labels", "max_slots")
MAX_LABEL = limits.MAX_LABEL


def _labels(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and 0 < len(v) <= MAX_LABEL for v in value
    ):
        raise BadRequest(f"labels must be a list of strings of 1 to {MAX_LABEL}", path="labels")
    return list(dict.fromkeys(value))


def patch_experiment(exp_id: int, body: dict[str, Any]) -> Experiment:
    unknown = sorted(set(body) - set(EDITABLE))
    if unknown:
        raise BadRequest(
            f"unknown field {unknown[0]!r}; expected some of {', '.join(EDITABLE)}",
            path=unknown[0],
        )
    with state_lock():
        exp = get_experiment(exp_id)
        config = dict(exp.config)
        if "name" in body:
            name = body["name"]
            if not isinstance(name, str) or not name.strip() or len(name) > limits.MAX_NAME:
                raise BadRequest(
                    f"name must be a non-empty string (at most {limits.MAX_NAME})", path="name"
                )
            exp.name = config["name"] = name
        if "description" in body:
            desc = body["description"]
            if not isinstance(desc, str) or len(desc) > limits.MAX_STRING:
                raise BadRequest(
                    f"description must be a string of at most {limits.MAX_STRING:,} characters",
                    path="description",
                )
            exp.description = config["description"] = desc
        if "labels" in body:
            exp.labels = config["labels"] = _labels(body["labels"])
        if "max_slots" in body:
            m = body["max_slots"]
            if m is not None and (
                isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= limits.INT32_MAX
            ):
                raise BadRequest(
                    f"max_slots must be an integer from 0 to {limits.INT32_MAX} or null",
                    path="max_slots",
                )
            config["resources"] = {**config.get("resources", {}), "max_slots": m}
        exp.config = config
        db.session.commit()
    return exp
