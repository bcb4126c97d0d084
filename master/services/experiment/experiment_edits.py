"""Editing an experiment's metadata (Determined's `det experiment set ...` and `label ...`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from detlab.expconf import limits
from master.context import state_lock
from master.db import db
from master.errors import BadRequest
from master.field_limits import check_labels, check_text
from master.models import Experiment
from master.services.experiment.experiments import get_experiment
from master.states import TERMINAL

EDITABLE = ("name", "description", "labels", "max_slots", "archived")


def patch_experiment(exp_id: int, body: dict[str, Any]) -> Experiment:
    unknown = sorted(set(body) - set(EDITABLE))
    if unknown:
        raise BadRequest(
            f"unknown field {unknown[0]!r}; expected some of {', '.join(EDITABLE)}",
            path=unknown[0],
        )
    with state_lock():
        exp = get_experiment(exp_id)
        conf = exp.conf
        if "name" in body:
            name = body["name"]
            if not isinstance(name, str) or not name.strip() or len(name) > limits.MAX_NAME:
                raise BadRequest(
                    f"name must be a non-empty string (at most {limits.MAX_NAME})", path="name"
                )
            exp.name = name
            conf = conf.replace(name=name)
        if "description" in body:
            desc = check_text(body["description"], "description")
            if desc is None:
                raise BadRequest("description must be a string", path="description")
            exp.description = desc
            conf = conf.replace(description=desc)
        if "labels" in body:
            labels = check_labels(body["labels"])
            exp.labels = labels
            conf = conf.replace(labels=tuple(labels))
        if "max_slots" in body:
            m = body["max_slots"]
            if m is not None and (
                isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= limits.INT32_MAX
            ):
                raise BadRequest(
                    f"max_slots must be an integer from 0 to {limits.INT32_MAX} or null",
                    path="max_slots",
                )
            conf = conf.replace(resources=dataclasses.replace(conf.resources, max_slots=m))
        if "archived" in body:
            _archive(exp, body["archived"])
        exp.conf = conf
        db.session.commit()
    return exp


def _archive(exp: Experiment, archived: Any) -> None:
    """As in Determined: only an ended experiment is archived (a running one would vanish from
    the listing while it still uses slots)."""
    if not isinstance(archived, bool):
        raise BadRequest("archived must be true or false", path="archived")
    if archived and exp.state not in TERMINAL:
        raise BadRequest(
            f"experiment {exp.id} is {exp.state.value}; only an ended experiment "
            "(COMPLETED, CANCELED or ERROR) can be archived",
            path="archived",
        )
    exp.archived = archived
