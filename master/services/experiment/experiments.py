"""The experiment state machine: create, pause, activate, cancel, kill, finish."""

from __future__ import annotations

import random
from typing import IO, Any

from flask import current_app
from sqlalchemy import func, inspect, select

from detlab.entrypoint import missing_file_message, tar_names
from detlab.expconf import (
    ConfigError,
    ExperimentConfig,
    ReproducibilityConfig,
    load_yaml,
    parse_experiment_config,
    warnings_for,
)
from master.context import state_lock
from master.db import db
from master.errors import BadRequest, NotFound, TooLarge
from master.models import Allocation, Experiment, Trial
from master.notify import agent_key, hub
from master.searcher.model import unavailable as model_unavailable
from master.services.experiment import model_defs
from master.services.experiment.searcher import apply_operations, load_searcher
from master.services.task.allocations import live_allocation, request_preemption
from master.services.transitions import born, set_experiment_state, set_trial_state
from master.states import (
    LIVE_ALLOCATION,
    STOPPING,
    STOPPING_TO_TERMINAL,
    State,
    check_action,
    is_terminal,
    terminal_for,
)


def get_experiment(exp_id: int) -> Experiment:
    exp = db.session.get(Experiment, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    return exp


def config_warnings(config_text: str, template: str | None = None) -> list[str]:
    """The Determined keys this config sets that detlab accepts without honouring."""
    return warnings_for(_raw_config(config_text, template))


def _raw_config(config_text: str, template: str | None) -> Any:
    raw = load_yaml(config_text)
    if template:
        from master.services.experiment.templates import apply_template

        raw, _ = apply_template(template, raw)
    return raw


def parse_config(config_text: str, template: str | None = None) -> ExperimentConfig:
    """Validate (merged over `template`, when named) and expand the config, typed."""
    cfg = current_app.config["DET"]
    raw = _raw_config(config_text, template)
    defaults = {"checkpoint_storage": cfg.default_checkpoint_storage()}
    conf = parse_experiment_config(raw, defaults=defaults)
    pool = conf.resources.resource_pool
    if pool not in cfg.pool_names():
        raise ConfigError(
            "resources.resource_pool",
            f"unknown resource pool {pool!r}; this cluster has {', '.join(cfg.pool_names())}",
        )
    check_search_size(conf, cfg.max_search_trials)
    sampler = conf.searcher.sampler
    if conf.searcher.name == "adaptive_asha" and (why := model_unavailable(sampler)):
        raise ConfigError("searcher.sampler", why)
    return conf


def check_entrypoint_files(conf: ExperimentConfig, model_def: IO[bytes] | bytes | None) -> None:
    """400 naming the file when the entrypoint's script is not in the uploaded model directory
    (it would fail on every restart). Without an upload there is nothing to check against."""
    if model_def is None:
        return
    names = tar_names(model_def)
    if names is None:
        return
    message = missing_file_message(conf.entrypoint, names)
    if message:
        raise BadRequest(message, path="entrypoint")


def _size_of(source: IO[bytes] | bytes | None) -> int | None:
    """The upload's size without reading it (a spooled file seeks); None when unknown."""
    if source is None:
        return None
    if isinstance(source, bytes | bytearray | memoryview):
        return len(source)
    try:
        here = source.tell()
        end = source.seek(0, 2)
        source.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None  # not seekable: the limit is enforced while it is stored


def search_trials(conf: ExperimentConfig) -> tuple[int, str]:
    """How many trials a search may create, and what it is ("grid", "max_trials")."""
    from master.searcher.grid import grid_trials

    s = conf.searcher
    if s.name == "grid":
        return grid_trials(conf), "grid"
    if s.name == "single" or s.max_trials is None:
        return 1, "single"
    return s.max_trials, "max_trials"


def check_search_size(conf: ExperimentConfig, cap: int) -> None:
    """A search larger than the master's `max_search_trials` is refused at submit: its trials
    (and the searcher's state) would not fit, and every state change would wait on it."""
    n, kind = search_trials(conf)
    if n <= cap:
        return
    if kind == "grid":
        raise ConfigError(
            "hyperparameters",
            f"grid of {n:,} trials exceeds searcher cap {cap:,} (max_search_trials); "
            "lower the counts or set searcher.max_trials",
        )
    raise ConfigError(
        "searcher.max_trials",
        f"{n:,} trials exceeds searcher cap {cap:,} (max_search_trials)",
    )


def create_experiment(
    owner_id: int,
    config_text: str,
    model_def: IO[bytes] | bytes | None,
    activate: bool = True,
    template: str | None = None,
) -> Experiment:
    limit = current_app.config["DET"].max_model_def_bytes
    size = _size_of(model_def)
    if size == 0:
        model_def = None  # an empty upload is no model definition
    if size is not None and size > limit:
        raise TooLarge(
            f"model definition is {size / 2**20:.1f} MiB; the limit is "
            f"{limit / 2**20:.0f} MiB (list large files in a .detignore)"
        )
    if not config_text or not config_text.strip():
        raise BadRequest("the experiment config is empty", path="")
    conf = parse_config(config_text, template)
    check_entrypoint_files(conf, model_def)
    seed = conf.reproducibility.experiment_seed
    if seed is None:
        seed = random.SystemRandom().randint(0, 2**31 - 1)
        conf = conf.replace(reproducibility=ReproducibilityConfig(experiment_seed=seed))
    with state_lock():
        exp = Experiment(
            name=conf.name,
            description=conf.description,
            state=State.ACTIVE if activate else State.PAUSED,
            owner_id=owner_id,
            config=conf.to_json(),  # the canonical JSON; original_config is what was written
            original_config=config_text,
            seed=seed,
            resource_pool=conf.resources.resource_pool,
            priority=conf.resources.priority,
            weight=conf.resources.weight,
        )
        db.session.add(exp)
        db.session.flush()
        born("experiment", exp.id, exp.state, "submitted")
        if model_def is not None:
            exp.model_def_size, exp.model_def_sha256 = model_defs.store(exp.id, model_def, limit)
        method = load_searcher(exp)
        apply_operations(exp, method, method.initial_operations())
        db.session.commit()
    return exp


def preview_search(config: ExperimentConfig) -> dict:
    """The closed-form summary of what a config's search runs."""
    from master.searcher.preview import preview

    return preview(config)


def rung_lengths(exp: Experiment) -> list[int]:
    """The distinct training lengths of an experiment's search, shortest first (ASHA rungs)."""
    try:
        return sorted({r["length"] for r in preview_search(exp.conf).get("rungs") or []})
    except Exception:  # a config stored by an older master: no rungs to show
        return []


def pause(exp_id: int) -> Experiment:
    with state_lock():
        exp = get_experiment(exp_id)
        check_action("experiment", exp.id, exp.state, "pause")
        set_experiment_state(exp, State.PAUSED, "paused by the user")
        for trial in exp.trials:
            if trial.state == State.ACTIVE:
                set_trial_state(trial, State.PAUSED, "its experiment was paused")
                _preempt(trial)
        db.session.commit()
    return exp


def activate(exp_id: int) -> Experiment:
    with state_lock():
        exp = get_experiment(exp_id)
        check_action("experiment", exp.id, exp.state, "activate")
        set_experiment_state(exp, State.ACTIVE, "activated by the user")
        for trial in exp.trials:
            if trial.state == State.PAUSED:
                set_trial_state(trial, State.ACTIVE, "its experiment was activated")
        db.session.commit()
    return exp


def cancel(exp_id: int, *, kill: bool = False) -> Experiment:
    """Stop every trial: gracefully (cancel: checkpoint then exit) or at once (kill)."""
    with state_lock():
        exp = get_experiment(exp_id)
        action = "kill" if kill else "cancel"
        check_action("experiment", exp.id, exp.state, action)
        why = f"{'killed' if kill else 'canceled'} by the user"
        if exp.state not in (State.STOPPING_ERROR,):
            set_experiment_state(exp, State.STOPPING_CANCELED, why)
        for trial in exp.trials:
            if is_terminal(trial.state):
                continue
            alloc = live_allocation(trial.id)
            if alloc is None:
                set_trial_state(trial, State.CANCELED, why)
                continue
            set_trial_state(trial, State.STOPPING_CANCELED, why)
            if kill:
                alloc.kill_requested = True
            _preempt(trial, alloc)
        maybe_finish(exp)
        db.session.commit()
    for alloc in _live_allocations(exp):
        if alloc.agent_id:
            hub().notify(agent_key(alloc.agent_id))
    return exp


def _live_allocations(exp: Experiment) -> list[Allocation]:
    ids = [t.id for t in exp.trials]
    if not ids:
        return []
    return list(
        db.session.execute(
            select(Allocation).where(
                Allocation.trial_id.in_(ids), Allocation.state.in_(LIVE_ALLOCATION)
            )
        ).scalars()
    )


def preempt_trial(trial: Trial) -> None:
    """Ask a running trial to checkpoint and exit; it queues again (caller commits)."""
    _preempt(trial)


def _preempt(trial: Trial, alloc: Allocation | None = None) -> None:
    alloc = alloc or live_allocation(trial.id)
    if alloc is not None:
        request_preemption(alloc, trial.id)


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
    stopping = State(exp.state)
    final = STOPPING_TO_TERMINAL[stopping]
    for trial in exp.trials:
        if is_terminal(trial.state):
            continue
        if trial.state in STOPPING_TO_TERMINAL:
            set_trial_state(trial, STOPPING_TO_TERMINAL[trial.state], "its process has exited")
        else:  # idle: waiting for work that will never come
            set_trial_state(trial, terminal_for(stopping), "its experiment has finished")
    why = "every trial has ended"
    if final == State.COMPLETED and exp.trials and all(t.state == State.ERROR for t in exp.trials):
        final = State.ERROR
        why = "every trial failed"
    set_experiment_state(exp, final, why)
    exp.progress = 1.0 if final == State.COMPLETED else exp.progress


def _num_trials(exp: Experiment) -> int:
    """The trial count: from the trials when already loaded, else by counting (a list passes
    its own counts to `experiment_json`)."""
    if "trials" not in inspect(exp).unloaded:
        return len(exp.trials)
    return db.session.scalar(select(func.count(Trial.id)).where(Trial.experiment_id == exp.id)) or 0


def experiment_json(exp: Experiment, *, num_trials: int | None = None) -> dict:
    """The experiment as the REST API shows it; `num_trials` when the caller counted already."""
    from master.ckpt.storage import redact_config
    from master.db import iso

    searcher = exp.conf.searcher
    return {
        "id": exp.id,
        "name": exp.name,
        "description": exp.description,
        "state": exp.state.value,
        "owner": exp.owner.username if exp.owner else None,
        "config": redact_config(exp.config),  # storage credentials masked
        "progress": exp.progress,
        "num_trials": _num_trials(exp) if num_trials is None else num_trials,
        "best_trial_id": exp.best_trial_id,
        "best_validation": exp.best_validation,
        "labels": exp.labels if exp.labels is not None else list(exp.conf.labels),
        "archived": bool(exp.archived),
        "searcher_metric": searcher.metric,
        "smaller_is_better": searcher.smaller_is_better,
        "resource_pool": exp.resource_pool,
        "priority": exp.priority,
        "weight": exp.weight,
        "seed": exp.seed,
        "created_at": iso(exp.created_at),
        "ended_at": iso(exp.ended_at),
    }
