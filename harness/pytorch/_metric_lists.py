"""Per-batch training metrics as plain lists of floats, per name (for reports and for the
metrics a checkpoint carries until they are reported)."""

from __future__ import annotations

from typing import Any

import torch


def scalar_lists(pending: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-batch metric dicts -> {name: [value per batch]} as Python floats (one sync per key)."""
    out: dict[str, list[float]] = {}
    if not pending:
        return out
    keys: list[str] = []
    for d in pending:
        for k in d:
            if k not in out:
                out[k] = []
                keys.append(k)
    for k in keys:
        vals = [d[k] for d in pending if k in d]
        tensors = [v for v in vals if isinstance(v, torch.Tensor)]
        if len(tensors) == len(vals):
            out[k] = torch.stack([t.reshape(()).double() for t in tensors]).cpu().tolist()
        else:
            out[k] = [float(v.item() if isinstance(v, torch.Tensor) else v) for v in vals]
    return out


def merge_lists(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict[str, list[float]]:
    out = {k: list(v) for k, v in a.items()}
    for k, v in b.items():
        out.setdefault(k, []).extend(v)
    return out
