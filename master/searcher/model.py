"""Model-based proposals for adaptive ASHA: a model fitted on the rung results (BOHB's idea).

Random proposals ignore everything a search has learned. Like BOHB (Falkner et al., 2018), a
model-guided ASHA fits a model on the results of the longest rung that already holds enough of
them and draws most new trials from it; a fixed share of trials stays uniformly random so the
search keeps exploring and a misleading low rung cannot trap it. Two models, both Optuna's
maintained samplers fed the rung's results as finished trials (no hand-written estimator):

* `tpe`: the multivariate TPE sampler (a density model; cheap, a few ms per proposal).
* `gp`: the Gaussian-process sampler (Bayesian optimisation with expected improvement; it
  converges much faster on smooth objectives, costs 0.2-0.8 s per proposal and needs PyTorch
  and SciPy on the master). At most `GP_MAX_POINTS` results feed it (the best half and the
  most recent half), which bounds that cost in long searches. Its expected improvement is
  maximised only inside a trust region (TuRBO's idea, Eriksson et al., 2019): the bounding box
  of the fitted rung's best quarter, widened by a tenth of each range. Why: the longest rung
  holds only trials that were promoted, so the GP has no data where trials die early, predicts
  an average-good value with a large variance there, and expected improvement sends many
  proposals to those regions (traced on the digits benchmark: a third to over half of them at
  the box's bounds, all stopped at the first rung). The uniform third of the proposals still
  explores the whole space, and the region grows as soon as good results arrive from outside.
  Improvement is measured against the best posterior mean at the observed points (plug-in EI),
  not the luckiest result: results are noisy, and EI over a lucky draw favours the region's
  corners, where the GP is unsure, over the configurations it predicts good.

Deterministic on purpose: a proposal is a pure function of the observations (in the order the
searcher passes them) and a seed the searcher draws from its own rng, so a fixed experiment
seed reproduces every trial and a restored snapshot continues exactly.

The hyperparameter space maps onto Optuna's distributions: int -> IntDistribution, double ->
FloatDistribution, log -> FloatDistribution over the exponent, categorical -> the index of the
value, nested groups -> dotted names; const values are not modelled.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RANDOM_FRACTION = 1 / 3  # BOHB's default share of random proposals
MODELS = ("tpe", "gp")
GP_MAX_POINTS = 64
TRUST_TOP = 1 / 4  # the gp's trust region bounds the best quarter of the fitted rung ...
TRUST_MARGIN = 0.1  # ... widened by this share of each dimension's range on both sides


@dataclass(frozen=True)
class Observation:
    """One result of a rung: the trial's hyperparameters, the rung's length and its metric."""

    hparams: dict[str, Any]
    length: int
    metric: float


def min_points(space: dict[str, Any]) -> int:
    """Results a rung needs before the model uses it: modelled dimensions + 2 (BOHB's rule)."""
    return len(_flat_space(space)) + 2


def unavailable(model: str) -> str | None:
    """Why this master cannot run `model` (None: it can). Checked when an experiment is made."""
    if model not in ("tpe", "gp"):
        return None
    if importlib.util.find_spec("optuna") is None:  # an extra: the quick start has no need
        return (
            f"sampler {model} needs Optuna on the master, which is not installed: "
            "pip install 'detlab[optuna]' there, or use sampler random"
        )
    if model != "gp":
        return None
    try:
        import scipy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        return (
            f"sampler gp needs PyTorch and SciPy on the master ({e}); "
            "pip install 'detlab[torch]' there, or use sampler tpe"
        )
    return None


def propose(
    space: dict[str, Any],
    observations: Sequence[Observation],
    seed: int,
    smaller_is_better: bool = True,
    model: str = "tpe",
    pending: Sequence[dict[str, Any]] = (),
) -> dict[str, Any] | None:
    """Hyperparameters drawn from `model` fitted on the longest rung with enough results.

    `pending`: hyperparameters of trials still training (gp only). The GP believes each of
    them scores what it predicts there (Kriging believer), so its uncertainty at a running
    trial collapses while its mean stays put: trials proposed while others run spread out
    around them instead of all landing on the same maximum of the acquisition, and the region
    being exploited keeps the value its results gave it.

    None when no rung has enough results yet (or nothing in the space can be modelled): the
    caller samples at random then.
    """
    flat = _flat_space(space)
    if not flat:
        return None
    needed = len(flat) + 2
    rung = _rung_to_model(observations, needed)
    if rung is None:
        return None
    if model == "gp" and len(rung) > GP_MAX_POINTS:
        rung = _best_and_latest(rung, GP_MAX_POINTS, smaller_is_better)

    import optuna  # imported here: a master that never models a search never pays for it

    distributions = {name: _distribution(hp) for name, hp in flat.items()}
    if model == "gp":
        distributions = _trust_region(flat, distributions, rung, smaller_is_better, needed)
    trials = []
    for obs in rung:
        params = _encode(flat, obs.hparams)
        if params is None or not _inside(distributions, params):
            continue
        value = obs.metric if smaller_is_better else -obs.metric
        trials.append(
            optuna.trial.create_trial(params=params, distributions=distributions, value=value)
        )
    if len(trials) < needed:
        return None
    running: list[dict[str, Any]] = []
    if model == "gp" and pending:
        running = _believed_running(flat, distributions, trials, pending)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with warnings.catch_warnings():  # both samplers' options are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(sampler=_sampler(model, running, seed), direction="minimize")
        study.add_trials(trials)
        params = study.ask(distributions).params
    return _decode(space, flat, params)


def _rung_to_model(observations: Sequence[Observation], needed: int) -> list[Observation] | None:
    """The finite results of the longest rung with at least `needed` of them, or None."""
    by_length: dict[int, list[Observation]] = {}
    for obs in observations:
        if math.isfinite(obs.metric):
            by_length.setdefault(obs.length, []).append(obs)
    ready = [length for length, rung in by_length.items() if len(rung) >= needed]
    if not ready:
        return None
    return by_length[max(ready)]


def _believed_running(
    flat: dict[str, Any],
    distributions: dict[str, Any],
    trials: Sequence[Any],
    pending: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Kriging believer (Ginsbourger et al., 2010): a trial still training is believed to
    score what the GP predicts for it, which collapses the GP's uncertainty there without
    moving its mean, so proposals made while others train spread out around them. Returns the
    encoded parameters of the pending trials inside the space and not already observed."""
    running: list[dict[str, Any]] = []
    seen = {tuple(sorted(t.params.items())) for t in trials}
    for hparams in pending:
        params = _encode(flat, hparams)
        if params is None or not _inside(distributions, params):
            continue
        key = tuple(sorted(params.items()))
        if key not in seen:
            seen.add(key)
            running.append(params)
    return running


def _sampler(model: str, running: list[dict[str, Any]], seed: int) -> Any:
    """Optuna's sampler for `model` (call with Optuna's ExperimentalWarning silenced)."""
    import optuna

    if model == "gp":
        return _plug_in_gp_sampler()(running, seed=seed, n_startup_trials=0)
    if model == "tpe":
        # TPE's own split: the best min(ceil(10% of n), 25) results form the "good" density.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=0, multivariate=True)
    raise ValueError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}")


@functools.cache
def _plug_in_gp_sampler() -> type:
    """Optuna's GPSampler with plug-in expected improvement: the incumbent is the best posterior
    mean at the observed points, not the best observed value.

    Why: rung results are noisy (a trial's seed moves the digits MLP's loss by a standard
    deviation of 0.016 at one configuration), so the best observed value is a lucky draw that
    lies below what the GP predicts anywhere it has data. Improvement over that draw is then
    only possible where the GP is unsure, and expected improvement sends proposals to the
    corners of the trust region (traced: 0.097, 0.849 and 0.91 for the learning rate, the box's
    bounds, over and over). Measured against the best posterior mean (Picheny et al., 2013,
    "plug-in" EI for noisy objectives) it favours configurations predicted good: on the digits
    benchmark (two seeds traced) 2-5x as many trials landed in the best region and the median
    full-length result improved by 0.007-0.012. Optuna marks `_optimize_acqf` as the override
    point; if a future Optuna changes the acquisition's internals this falls back to its stock
    EI (a unit test guards the installed version).
    """
    import optuna
    import torch
    from optuna._gp import acqf as acqf_module

    # One intra-op thread: the GP's matrices are tiny (one row per rung result), so more threads
    # only contend, with each other and with everything else on the master's machine. Measured on
    # 2 cores under load (8-14): a GP test took 24 s and 68 s with one thread against 74 s and
    # 94 s with torch's default, in alternating pairs. Set once, for the process: the master runs
    # no other torch work.
    torch.set_num_threads(1)

    class PlugInGPSampler(optuna.samplers.GPSampler):
        def __init__(self, running: Sequence[dict[str, Any]], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._running = tuple(running)  # params of the trials still training

        def _optimize_acqf(self, acqf: Any, best_params: Any) -> Any:
            acqf = _plug_in(acqf, acqf_module, torch, self._running)
            return super()._optimize_acqf(acqf, best_params)

    return PlugInGPSampler


def _plug_in(
    acqf: Any, acqf_module: Any, torch: Any, running: Sequence[dict[str, Any]] = ()
) -> Any:
    """`acqf` (stock log EI) rebuilt with the best posterior mean as its threshold, and the GP
    told that each `running` point scores its own posterior mean (Kriging believer)."""
    if type(acqf) is not acqf_module.LogEI:
        return acqf  # constraints or several objectives: left as Optuna made it
    if _FELL_BACK:
        return acqf
    try:
        gpr = acqf._gpr
        with torch.no_grad():
            mean, _var = gpr.posterior(gpr._X_train)
            if running:
                x = torch.from_numpy(
                    # Only the params are read; the trial list just sizes the result.
                    acqf.search_space.get_normalized_params([None] * len(running), list(running))
                )
                gpr.append_running_data(x, gpr.posterior(x)[0])
        return acqf_module.LogEI(
            gpr=gpr, search_space=acqf.search_space, threshold=float(mean.max())
        )
    except (AttributeError, TypeError) as e:
        # Optuna's GP internals changed: searches still run, on stock EI, but worse than measured.
        _FELL_BACK.append(repr(e))
        _log.error(
            "sampler gp: this Optuna (%s) changed the GP internals detlab builds on (%r); "
            "falling back to Optuna's stock expected improvement for the rest of this master's "
            "life. Install an Optuna in the tested range (pyproject.toml) to restore plug-in EI.",
            getattr(acqf_module, "__name__", "optuna._gp.acqf"),
            e,
        )
        return acqf


# Set once the plug-in acquisition could not be built (then logged once, not per proposal).
_FELL_BACK: list[str] = []
_log = logging.getLogger("detlab.searcher")


def _inside(distributions: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether every param lies within its (possibly narrowed) distribution."""
    for name, value in params.items():
        dist = distributions[name]
        if hasattr(dist, "low") and not dist.low <= value <= dist.high:
            return False
    return True


def _trust_region(
    flat: dict[str, dict[str, Any]],
    distributions: dict[str, Any],
    rung: list[Observation],
    smaller_is_better: bool,
    needed: int,
) -> dict[str, Any]:
    """The numeric distributions narrowed to the GP's trust region.

    The region is the bounding box of the rung's best quarter (at least `needed` results),
    widened by TRUST_MARGIN of each range on both sides and clipped to the space; categorical
    dimensions keep every value. Stateless (a function of the rung alone), so a proposal stays a
    pure function of the observations and the seed.
    """
    from optuna.distributions import FloatDistribution, IntDistribution

    sign = 1.0 if smaller_is_better else -1.0
    encoded = [(sign * o.metric, p) for o in rung if (p := _encode(flat, o.hparams)) is not None]
    encoded.sort(key=lambda vp: vp[0])
    top = [p for _, p in encoded[: max(needed, math.ceil(len(encoded) * TRUST_TOP))]]
    out = dict(distributions)
    for name, dist in distributions.items():
        if not hasattr(dist, "low") or not top:
            continue
        span = dist.high - dist.low
        lo = max(dist.low, min(p[name] for p in top) - TRUST_MARGIN * span)
        hi = min(dist.high, max(p[name] for p in top) + TRUST_MARGIN * span)
        if isinstance(dist, IntDistribution):
            lo_i, hi_i = math.floor(lo), math.ceil(hi)
            if lo_i == hi_i:
                lo_i, hi_i = max(dist.low, lo_i - 1), min(dist.high, hi_i + 1)
            out[name] = IntDistribution(lo_i, hi_i)
        else:
            out[name] = FloatDistribution(lo, hi)
    return out


def _best_and_latest(
    rung: list[Observation], limit: int, smaller_is_better: bool
) -> list[Observation]:
    """The best limit/2 results and the most recent ones up to `limit`, in arrival order."""
    sign = 1.0 if smaller_is_better else -1.0
    by_value = sorted(range(len(rung)), key=lambda i: (sign * rung[i].metric, i))
    keep = set(by_value[: limit // 2])
    for i in range(len(rung) - 1, -1, -1):
        if len(keep) >= limit:
            break
        keep.add(i)
    return [rung[i] for i in sorted(keep)]


# -- the space, flattened --------------------------------------------------------------------


def _flat_space(space: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Modelled hyperparameters by dotted name (sorted); const ones are left out."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(space):
        hp = space[name]
        if hp["type"] == "object":
            out.update(_flat_space(hp["vals"], f"{prefix}{name}."))
        elif hp["type"] != "const":
            out[prefix + name] = hp
    return out


def _distribution(hp: dict[str, Any]) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    kind = hp["type"]
    if kind == "int":
        return IntDistribution(int(hp["minval"]), int(hp["maxval"]))
    if kind in ("double", "log"):
        return FloatDistribution(float(hp["minval"]), float(hp["maxval"]))
    if kind == "categorical":
        return CategoricalDistribution(list(range(len(hp["vals"]))))
    raise ValueError(f"unknown hyperparameter type {kind!r}")


def _lookup(hparams: dict[str, Any], dotted: str) -> Any:
    value: Any = hparams
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def _encode(flat: dict[str, dict[str, Any]], hparams: dict[str, Any]) -> dict[str, Any] | None:
    """A trial's hyperparameters as Optuna params; None if one lies outside the space."""
    params: dict[str, Any] = {}
    for name, hp in flat.items():
        try:
            value = _lookup(hparams, name)
        except KeyError:
            return None
        kind = hp["type"]
        if kind == "categorical":
            matches = [i for i, v in enumerate(hp["vals"]) if v == value]
            if not matches:
                return None
            params[name] = matches[0]
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if kind == "log":
            if value <= 0:
                return None
            value = math.log(value, hp.get("base", 10.0))
        lo, hi = float(hp["minval"]), float(hp["maxval"])
        if not lo - 1e-9 <= float(value) <= hi + 1e-9:
            return None
        params[name] = int(value) if kind == "int" else min(max(float(value), lo), hi)
    return params


def _decode(
    space: dict[str, Any], flat: dict[str, dict[str, Any]], params: dict[str, Any]
) -> dict[str, Any]:
    """Optuna params back into the nested hyperparameter dict (const values filled in)."""

    def build(group: dict[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in sorted(group):
            hp, key = group[name], prefix + name
            kind = hp["type"]
            if kind == "const":
                out[name] = copy.deepcopy(hp["val"])
            elif kind == "object":
                out[name] = build(hp["vals"], f"{key}.")
            elif kind == "categorical":
                out[name] = copy.deepcopy(hp["vals"][params[key]])
            elif kind == "log":
                out[name] = hp.get("base", 10.0) ** params[key]
            elif kind == "int":
                out[name] = int(params[key])
            else:
                out[name] = float(params[key])
        return out

    return build(space, "")
