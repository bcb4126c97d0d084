"""`det experiment continue` (Determined 0.38's ContinueExperiment): an ended single-trial
experiment becomes ACTIVE again and its same trial trains on from its latest checkpoint; an
ended grid or random search (no overrides) takes up its unfinished trials the same way.

What changes is decided in `master.continuation` (pure); this applies it in one transaction
under the state lock, through the state writers (`transitions.continue_*_state`): the
experiment's config becomes the merged one (`original_config` stays what was submitted), the
trial's searcher operation restarts at the new max_length (the script resumes at the steps its
checkpoint holds), its restarts count from zero, and its metrics and checkpoints stay.
"""

from __future__ import annotations

from typing import Any

from detlab.expconf import ConfigError, load_yaml
from master.context import state_lock
from master.continuation import SEARCHES, check_searcher, continued_hparams, merged_config
from master.db import db
from master.errors import BadRequest, Conflict
from master.models import Experiment, Trial
from master.searcher.base import Create, Resume
from master.services.experiment.experiments import get_experiment, parse_config
from master.services.experiment.searcher import (
    apply_operations,
    load_searcher,
    reopen_trial,
    resume_blocker,
)
from master.services.transitions import continue_experiment_state
from master.states import State, check_continue


def continue_experiment(exp_id: int, override_text: str | None) -> Experiment:
    """Re-open experiment `exp_id` with `override_text` (YAML, may be empty) merged over its
    config. 400 for a config or search it cannot continue; 409 while it has not ended."""
    override = load_yaml(override_text) if override_text and override_text.strip() else {}
    if override is None:
        override = {}
    with state_lock():
        exp = get_experiment(exp_id)
        if exp.conf.unmanaged:
            raise BadRequest(
                f"experiment {exp_id} is unmanaged: its script reattaches itself (core_v2)",
                path="id",
            )
        if exp.archived:
            raise Conflict(f"experiment {exp_id} is archived; unarchive it to continue it")
        # Over the stored (expanded) config, Determined's "active config": a template's keys
        # and the experiment's seed are in it already. The search's shape is checked before the
        # state (as Determined does), so a multi-trial search is refused for what it is.
        conf = parse_config(_dump(merged_config(exp.config, override)))
        trials = list(exp.trials)
        check_searcher(
            exp.conf.searcher.name, conf.searcher.name, len(trials), exp.id, bool(override)
        )
        check_continue("experiment", exp.id, exp.state)
        if exp.conf.searcher.name in SEARCHES:
            _continue_search(exp, trials)
            db.session.commit()
            return exp
        (trial,) = trials
        hparams = continued_hparams(
            exp.conf.to_json()["hyperparameters"], conf.to_json()["hyperparameters"], trial.hparams
        )
        _check_latest_checkpoint(trial)
        continue_experiment_state(exp, "continued by the user")
        exp.conf = conf
        exp.name, exp.description = conf.name, conf.description
        if "labels" in override:
            exp.labels = list(conf.labels)
        if "resources" in override:  # else keep what `det e set priority|weight` changed
            exp.resource_pool = conf.resources.resource_pool
            exp.priority, exp.weight = conf.resources.priority, conf.resources.weight
        exp.progress = 0.0
        reopen_trial(trial, exp)  # asked for the whole (new) max_length, as in Determined
        trial.hparams = hparams
        method = load_searcher(exp)
        apply_operations(exp, method, method.on_continue(trial.request_id))
        db.session.commit()
    return exp


def _continue_search(exp: Experiment, trials: list[Trial]) -> None:
    """A grid or random search as it was: its unfinished trials (errored, canceled) train on
    from their latest checkpoints, keeping their ids, and the trials it never created are
    created; a completed trial stays completed. The searcher decides which go now and which
    wait for a slot (`Resume`, within max_concurrent_trials); `apply_operations` reopens each
    as its turn comes. 409 when nothing is left to do."""
    unfinished = {t.request_id: t for t in trials if t.state != State.COMPLETED}
    method = load_searcher(exp)
    ops = method.on_continue_search(list(unfinished), {t.request_id for t in trials})
    if not any(isinstance(op, Resume | Create) for op in ops):
        raise Conflict(
            f"experiment {exp.id} has been completed: every trial of its "
            f"{exp.conf.searcher.name} search finished, there is nothing to continue"
        )
    # Every unfinished trial resumes sooner or later: refuse now rather than start one over.
    for trial in unfinished.values():
        _check_latest_checkpoint(trial)
    continue_experiment_state(exp, "continued by the user")
    exp.progress = 0.0
    apply_operations(exp, method, ops)


def _check_latest_checkpoint(trial: Trial) -> None:
    """A trial whose latest checkpoint was deleted would silently start over: refuse."""
    why = resume_blocker(trial)
    if why is not None:
        raise Conflict(why)


def _dump(raw: Any) -> str:
    import yaml

    if not isinstance(raw, dict):
        raise ConfigError("", "the merged config is not a mapping")
    return yaml.safe_dump(raw, sort_keys=False)
