"""Merging a configuration template under an experiment config (Determined's rules). Pure.

- scalars: the config's value wins;
- mappings merge recursively (the config's keys win);
- lists are replaced by the config's, except `bind_mounts` and `resources.devices`, which are
  appended (the template's first, an entry the config repeats is kept once);
- `environment.environment_variables` merge by variable name (also per device type);
- `checkpoint_storage` merges only when both name the same `type`; otherwise the config's
  replaces the template's;
- `searcher` merges only when both name the same searcher (or the config names none);
- `hyperparameters`: each hyperparameter is replaced whole (a spec never mixes with another).

`merge_with_sources` also says where each leaf of the result came from.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

APPENDED = ("bind_mounts", "resources.devices")
ENV_VARS = "environment.environment_variables"
SAME_KIND = {"checkpoint_storage": "type", "searcher": "name"}
WHOLE_CHILDREN = ("hyperparameters",)
_DEVICES = ("cpu", "cuda", "gpu", "rocm")


def merge(template: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The config over the template."""
    return merge_with_sources(template, config)[0]


def merge_with_sources(
    template: Mapping[str, Any],
    config: Mapping[str, Any],
    template_name: str = "template",
    config_name: str = "config",
) -> tuple[dict[str, Any], dict[str, str]]:
    """(merged, {dotted path of each leaf: template_name or config_name})."""
    sources: dict[str, str] = {}
    merged = _merge_map(template, config, "", sources, template_name, config_name)
    return merged, sources


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mark(value: Any, path: str, who: str, sources: dict[str, str]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _mark(v, _join(path, str(k)), who, sources)
    else:
        sources[path] = who


def _merge_map(
    tpl: Mapping[str, Any],
    cfg: Mapping[str, Any],
    path: str,
    sources: dict[str, str],
    tname: str,
    cname: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in list(tpl) + [k for k in cfg if k not in tpl]:
        here = _join(path, str(key))
        in_t, in_c = key in tpl, key in cfg
        t, c = tpl.get(key), cfg.get(key)
        if not in_c or c is None and in_t:
            out[key] = copy.deepcopy(t)
            _mark(t, here, tname, sources)
        elif not in_t:
            out[key] = copy.deepcopy(c)
            _mark(c, here, cname, sources)
        else:
            out[key] = _merge_value(t, c, here, sources, tname, cname)
    return out


def _merge_value(t: Any, c: Any, path: str, sources: dict[str, str], tname: str, cname: str) -> Any:
    if path in APPENDED and isinstance(t, list) and isinstance(c, list):
        both = copy.deepcopy(t) + [x for x in copy.deepcopy(c) if x not in t]
        sources[path] = f"{tname} + {cname}"
        return both
    if path == ENV_VARS:
        return _merge_env(t, c, path, sources, tname, cname)
    if isinstance(t, Mapping) and isinstance(c, Mapping):
        kind = SAME_KIND.get(path)
        if kind is not None and c.get(kind) is not None and t.get(kind) != c.get(kind):
            _mark(c, path, cname, sources)
            return copy.deepcopy(dict(c))
        if path in WHOLE_CHILDREN:
            out = {k: copy.deepcopy(v) for k, v in t.items() if k not in c}
            for k, v in t.items():
                if k not in c:
                    _mark(v, _join(path, str(k)), tname, sources)
            for k, v in c.items():
                out[k] = copy.deepcopy(v)
                _mark(v, _join(path, str(k)), cname, sources)
            return out
        return _merge_map(t, c, path, sources, tname, cname)
    _mark(c, path, cname, sources)
    return copy.deepcopy(c)


def _env_dict(value: Any) -> dict[str, Any] | None:
    """Environment variables as {name: value}: from a mapping or a list of "K=V"."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            k, sep, v = str(item).partition("=")
            out[k] = v if sep else None
        return out
    return None


def _env_list(d: dict[str, Any]) -> list[str]:
    return [k if v is None else f"{k}={v}" for k, v in d.items()]


def _per_device(v: Any) -> bool:
    return isinstance(v, Mapping) and bool(v) and set(v) <= set(_DEVICES)


def _merge_env(t: Any, c: Any, path: str, sources: dict[str, str], tname: str, cname: str) -> Any:
    if _per_device(t) or _per_device(c):
        td = t if _per_device(t) else {d: t for d in ("cpu", "cuda")}
        cd = c if _per_device(c) else {d: c for d in ("cpu", "cuda")}
        out: dict[str, Any] = {}
        for dev in list(td) + [d for d in cd if d not in td]:
            here = _join(path, dev)
            if dev in td and dev in cd:
                out[dev] = _merge_env(td[dev], cd[dev], here, sources, tname, cname)
            else:
                out[dev] = copy.deepcopy(td.get(dev, cd.get(dev)))
                sources[here] = tname if dev in td else cname
        return out
    tdict, cdict = _env_dict(t), _env_dict(c)
    if tdict is None or cdict is None:
        sources[path] = cname
        return copy.deepcopy(c)
    merged = {**tdict, **cdict}
    for k in merged:
        sources[_join(path, k)] = cname if k in cdict else tname
    as_list = isinstance(c, list) or (isinstance(t, list) and not isinstance(c, Mapping))
    return _env_list(merged) if as_list else merged
