"""Which experiments' GC plans may have changed although no checkpoint arrived or left.

The periodic GC pass plans an experiment again only when its live checkpoints changed
(`master.ckpt.gc.collect_all`): planning every experiment every second would not scale. A
plan also depends on the validations that rank the checkpoints and on the model registry,
which change on their own:
- a checkpoint's validation can arrive after the checkpoint (the PyTorch loop checkpoints at the
  end of an operation and validates after it; Core API scripts report in either order), and a
  better one makes the previous best deletable;
- a deleted model version leaves its checkpoint unprotected.
Their writers call `changed(experiment_id)`; the pass reads `generation(experiment_id)` before
it plans and plans again when it moved. A counter, not a flag: a change committed while a pass
plans from older rows still moves it, so the next pass plans again.
"""

from __future__ import annotations

from collections.abc import Iterable

from master.context import master_state


def changed(experiment_ids: int | Iterable[int]) -> None:
    """The plans of these experiments may have changed: the next GC pass plans them again."""
    ids = [experiment_ids] if isinstance(experiment_ids, int) else list(experiment_ids)
    memory = master_state().checkpoints
    with memory.replan_lock:
        for exp_id in ids:
            memory.replan_generation[exp_id] = memory.replan_generation.get(exp_id, 0) + 1


def generation(experiment_id: int) -> int:
    memory = master_state().checkpoints
    with memory.replan_lock:
        return memory.replan_generation.get(experiment_id, 0)
