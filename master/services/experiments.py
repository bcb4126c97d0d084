"""The experiment state machine: create, pause, activate, cancel, kill, finish."""

from __future__ import annotations

import hashlib
import random

from flask import current_app
from sqlalchemy import func, inspect, select

from master.db import db, utcnow
from master.errors import BadRequest, NotFound, TooLarge
from master.expconf import ConfigError, load_yaml, validate_experiment_config
from master.models import Allocation, Experiment, Trial
from master.notify import hub, preempt_key, trial_key
from master.searcher.model import unavailable as model_unavailable
from master.services import STATE_LOCK
from master.services.searcher import apply_operations, live_allocation, load_searcher
from master.states import (
    STOPPING,
    STOPPING_TO_TERMINAL,
    State,
    check_action,
    is_terminal,
)


def get_experiment(exp_id: int) -> Experiment:
    exp = db.session.get(Experiment, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    return exp


def parse_config(config_text: str) -> dict:
    cfg = current_app.config["DET"]
    raw = load_yaml(config_text)
    defaults = {"checkpoint_storage": cfg.default_checkpoint_storage()}
    config = validate_experiment_config(raw, defaults=defaults)
    pool = config["resources"]["resource_pool"]
    if pool not in cfg.pool_names():
        raise ConfigError(
            "resources.resource_pool",
            f"unknown resource pool {pool!r}; this cluster has {', '.join(cfg.pool_names())}",
        )
    sampler = config["searcher"].get("sampler")
    if config["searcher"]["name"] == "adaptive_asha" and (why := model_unavailable(sampler)):
        raise ConfigError("searcher.sampler", why)
    return config


def create_experiment(
    owner_id: int, config_text: str, model_def: bytes | None, activate: bool = True
) -> Experiment:
    limit = current_app.config["DET"].max_model_def_bytes
    if model_def is not None and len(model_def) > limit:
        raise TooLarge(
            f"model definition is {len(model_def) / 2**20:.1f} MiB; the limit is "
            f"{limit / 2**20:.0f} MiB (list large files in a .detignore)"
        )
    if not config_text or not config_text.strip():
        raise BadRequest("the experiment config is empty", path="")
    config = parse_config(config_text)
    seed = config.get("reproducibility", {}).get("experiment_seed")
    if seed is None:
        seed = random.SystemRandom().randint(0, 2**31 - 1)
        config.setdefault("reproducibility", {})["experiment_seed"] = seed
    with STATE_LOCK:
        exp = Experiment(
            name=config.get("name") or "Experiment",
            description=config.get("description"),
            state=(State.ACTIVE if activate else State.PAUSED).value,
            owner_id=owner_id,
            config=config,
            original_config=config_text,
            model_def=model_def,
            model_def_sha256=hashlib.sha256(model_def).hexdigest() if model_def else None,
            seed=int(seed),
            resource_pool=config["resources"]["resource_pool"],
            priority=config["resources"].get("priority", 42),
            weight=config["resources"].get("weight", 1.0),
        )
        db.session.add(exp)
        db.session.flush()
        method = load_searcher(exp)
        apply_operations(exp, method, method.initial_operations())
        db.session.commit()
    return exp


def pause(exp_id: int) -> Experiment:
    with STATE_LOCK:
        exp = get_experiment(exp_id)
        check_action("experiment", exp.id, exp.state, "pause")
        exp.state = State.PAUSED.value
        for trial in exp.trials:
            if trial.state == State.ACTIVE:
                trial.state = State.PAUSED.value
                _preempt(trial)
        db.session.commit()
    return exp


def activate(exp_id: int) -> Experiment:
    with STATE_LOCK:
        exp = get_experiment(exp_id)
        check_action("experiment", exp.id, exp.state, "activate")
        exp.state = State.ACTIVE.value
        for trial in exp.trials:
            if trial.state == State.PAUSED:
                trial.state = State.ACTIVE.value
        db.session.commit()
    return exp


def cancel(exp_id: int, *, kill: bool = False) -> Experiment:
    """Stop every trial: gracefully (cancel: checkpoint then exit) or at once (kill)."""
    with STATE_LOCK:
        exp = get_experiment(exp_id)
        check_action("experiment", exp.id, exp.state, "kill" if kill else "cancel")
        if exp.state not in (State.STOPPING_ERROR,):
            exp.state = State.STOPPING_CANCELED.value
        for trial in exp.trials:
            if is_terminal(trial.state):
                continue
            alloc = live_allocation(trial.id)
            if alloc is None:
                trial.state = State.CANCELED.value
                trial.ended_at = utcnow()
                continue
            trial.state = State.STOPPING_CANCELED.value
            if kill:
                alloc.kill_requested = True
            _preempt(trial, alloc)
        maybe_finish(exp)
        db.session.commit()
    from master.notify import agent_key

    for alloc in _live_allocations(exp):
        if alloc.agent_id:
            hub.notify(agent_key(alloc.agent_id))
    return exp


def _live_allocations(exp: Experiment) -> list[Allocation]:
    ids = [t.id for t in exp.trials]
    if not ids:
        return []
    return list(
        db.session.execute(
            select(Allocation).where(
                Allocation.trial_id.in_(ids), Allocation.state.in_(("ASSIGNED", "RUNNING"))
            )
        ).scalars()
    )


def preempt_trial(trial: Trial) -> None:
    """Ask a running trial to checkpoint and exit; it queues again (caller commits)."""
    _preempt(trial)


def _preempt(trial: Trial, alloc: Allocation | None = None) -> None:
    alloc = alloc or live_allocation(trial.id)
    if alloc is None or alloc.preempt_requested:
        return
    alloc.preempt_requested = True
    alloc.preempt_requested_at = utcnow()
    db.session.flush()
    hub.notify(preempt_key(alloc.id), trial_key(trial.id))


def maybe_finish(exp: Experiment) -> None:
    """Move a stopping experiment to its end state once no trial is left running.

    A searcher that shut down leaves idle trials (waiting for more work) behind: they end with it.
    """
    if exp.state not in STOPPING:
        return
    for trial in exp.trials:
        if is_terminal(trial.state):
            continue
        if live_allocation(trial.id) is not None:
            return
    final = STOPPING_TO_TERMINAL[State(exp.state)]
    for trial in exp.trials:
        if is_terminal(trial.state):
            continue
        if State(trial.state) in STOPPING_TO_TERMINAL:
            trial.state = STOPPING_TO_TERMINAL[State(trial.state)].value
        else:  # idle: waiting for work that will never come
            trial.state = (State.COMPLETED if final == State.COMPLETED else State.CANCELED).value
        trial.ended_at = trial.ended_at or utcnow()
    if final == State.COMPLETED and exp.trials and all(t.state == State.ERROR for t in exp.trials):
        final = State.ERROR
    exp.state = final.value
    exp.ended_at = utcnow()
    exp.progress = 1.0 if final == State.COMPLETED else exp.progress


def _num_trials(exp: Experiment) -> int:
    """The trial count: from the loaded trials (list pages preload them), else by counting."""
    if "trials" not in inspect(exp).unloaded:
        return len(exp.trials)
    return db.session.scalar(select(func.count(Trial.id)).where(Trial.experiment_id == exp.id)) or 0


def experiment_json(exp: Experiment) -> dict:
    from master.ckpt.storage import redact_config
    from master.db import iso

    searcher = exp.config.get("searcher", {})
    return {
        "id": exp.id,
        "name": exp.name,
        "description": exp.description,
        "state": exp.state,
        "owner": exp.owner.username if exp.owner else None,
        "config": redact_config(exp.config),  # storage credentials masked
        "progress": exp.progress,
        "num_trials": _num_trials(exp),
        "best_trial_id": exp.best_trial_id,
        "best_validation": exp.best_validation,
        "searcher_metric": searcher.get("metric"),
        "smaller_is_better": searcher.get("smaller_is_better", True),
        "resource_pool": exp.resource_pool,
        "priority": exp.priority,
        "weight": exp.weight,
        "seed": exp.seed,
        "created_at": iso(exp.created_at),
        "ended_at": iso(exp.ended_at),
    }
