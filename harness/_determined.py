"""The `determined` alias the agent's runtimes give to trials (never installed globally).

`harness/_alias/` holds a one-file `determined` package; the runtimes put that directory on a
trial's PYTHONPATH, so Determined 0.38 scripts run unchanged on the cluster:
`import determined as det`, `from determined import core, pytorch`,
`python3 -m determined.launch.torch_distributed -- python3 train.py`.

Every `determined.X` resolves to the module `harness.X` itself (the same module object, so
classes, isinstance checks and module state are shared). Modules of Determined that detlab does
not provide (TensorFlow/Keras, DeepSpeed, Horovod, Lightning, ...) raise an ImportError that
names the module and says why.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

ALIAS = "determined"
TARGET = "harness"
DOCS = "docs/determined-compat.md"

# Determined 0.38 modules detlab does not provide, and why (longest prefix wins).
UNSUPPORTED: dict[str, str] = {
    "determined.keras": "TensorFlow/Keras trials (TFKerasTrial) are not supported",
    "determined.tensorflow": "TensorFlow trials are not supported",
    "determined.estimator": "TensorFlow Estimator trials are not supported",
    "determined.horovod": "Horovod is not supported; use torch.distributed",
    "determined.deepspeed": "it was renamed: use determined.pytorch.deepspeed",
    "determined.pytorch.lightning": "the PyTorch Lightning adapter is not supported",
    "determined.integrations": "the framework integrations (transformers, ...) are not supported",
    "determined.launch.horovod": "the Horovod launcher is not supported",
    "determined.profiler": "the system-metrics profiler is not supported",
    "determined.pytorch.experimental": "batch inference (torch_batch_process) is not supported",
    "determined.tensorboard": (
        "its internals are not provided; use core_context.train.get_tensorboard_path() and "
        "upload_tensorboard_files(), or PyTorchTrialContext.get_tensorboard_writer()"
    ),
    "determined.cli": "Determined's own CLI is not provided; use detlab's `det`",
    "determined.deploy": "`det deploy` is not provided",
}


def unsupported_reason(fullname: str) -> str | None:
    parts = fullname.split(".")
    for n in range(len(parts), 1, -1):
        reason = UNSUPPORTED.get(".".join(parts[:n]))
        if reason is not None:
            return reason
    return None


def unsupported_error(fullname: str) -> ImportError:
    """The ImportError for a Determined module detlab does not provide, saying why."""
    reason = unsupported_reason(fullname) or "it is not provided"
    return ImportError(
        f"No module named {fullname!r}: detlab provides Determined 0.38's Core API, "
        f"PyTorchTrial and the Trainer API, but {reason} (see {DOCS})",
        name=fullname,
    )


class _AliasLoader(importlib.abc.Loader):
    """Loads `determined.X` as the already-imported module `harness.X`."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # harness.X is already executed

    # `python3 -m determined.launch.torch_distributed` (runpy) runs the target's code as __main__.
    def get_code(self, fullname: str) -> Any:
        spec = importlib.util.find_spec(self.target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"cannot run {fullname}: no code for {self.target}", name=fullname)
        return spec.loader.get_code(self.target)

    def is_package(self, fullname: str) -> bool:
        spec = importlib.util.find_spec(self.target)
        return bool(spec and spec.submodule_search_locations is not None)


class AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(ALIAS + "."):
            return None
        if unsupported_reason(fullname) is not None:
            raise unsupported_error(fullname)
        real = TARGET + fullname[len(ALIAS) :]
        try:
            spec = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            raise ImportError(
                f"No module named {fullname!r}: detlab's harness has no {real!r} "
                f"(the Determined modules it provides are listed in {DOCS})",
                name=fullname,
            )
        out = importlib.machinery.ModuleSpec(
            fullname,
            _AliasLoader(real),
            origin=spec.origin,
            is_package=spec.submodule_search_locations is not None,
        )
        out.has_location = spec.has_location
        return out


def install() -> None:
    """Put the alias finder first on sys.meta_path (once)."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
