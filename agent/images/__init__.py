"""The docker runtime's default images: one per slot type, with the harness's needs and PyTorch.

Pure data (no I/O): the names the agent uses when an experiment sets no `environment.image`, and
what goes into them. `agent/images/build.py` builds them (`scripts/build-images`).

- cpu: Debian bookworm (minbase) + python3 (3.11), PyTorch 2.13.0's CPU wheel, numpy,
  scikit-learn, PyYAML, JupyterLab and aiohttp (notebooks and shells), TensorBoard (`det
  tensorboard`'s harness/tb_serve.py, and the event writer of trials). Built here: the root
  filesystem with debootstrap, the Python packages with the host's pip from the package index
  (`--target`, same Python 3.11 and platform), joined into one `docker import`.
- cuda: `images/cuda.Dockerfile` (NVIDIA's CUDA runtime base from a registry + the same
  packages with PyTorch's CUDA wheel). Not built by the tests: it needs a registry and a GPU.

The harness itself is not in them: the agent injects it (agent/runtime/_inject.py), so an image
built with one detlab version serves the next.
"""

from __future__ import annotations

import re

TORCH_VERSION = "2.13.0"
REPOSITORY = "detlab/pytorch"
DEFAULT_IMAGES = {
    "cpu": f"{REPOSITORY}:{TORCH_VERSION}-cpu",
    "cuda": f"{REPOSITORY}:{TORCH_VERSION}-cuda",
}
# What a trial of examples/ and a Determined-style script commonly import, besides torch; and
# what notebooks (JupyterLab), shells (harness/shell/server.py: aiohttp) and TensorBoards
# (harness/tb_serve.py: tensorboard) run in the image. The same pins as pyproject.toml's extras.
PACKAGES = (
    "numpy>=1.26,<3",
    "scikit-learn>=1.4,<2",
    "PyYAML>=6.0,<7",
    "jupyterlab>=4.4,<4.5",
    "aiohttp>=3.12,<3.13",
    "tensorboard>=2.21,<2.22",
)
BUILD_HINT = "scripts/build-images"


def default_image(gpu: bool) -> str:
    """The image a trial runs in when its experiment names none."""
    return DEFAULT_IMAGES["cuda" if gpu else "cpu"]


def slot_kind(gpu: bool) -> str:
    return "cuda" if gpu else "cpu"


_MISSING = re.compile(r"^(?:ModuleNotFoundError|ImportError): No module named '([^']+)'")


def missing_module(line: str) -> str | None:
    """The module named by a `ModuleNotFoundError: No module named 'x'` line, else None."""
    m = _MISSING.match(line.strip())
    return m.group(1) if m else None


def missing_module_message(module: str, image: str) -> str:
    """Why a trial failed when its image lacks a module its entrypoint imports, and what to do."""
    top = module.split(".")[0]
    default = DEFAULT_IMAGES["cpu"]
    return (
        f"the trial imports the Python module '{module}', which the image {image} does not have "
        f"(nor the model directory): run it in an image that has '{top}' (environment.image; "
        f"detlab's default {default} has PyTorch, numpy, scikit-learn and PyYAML), or install it "
        f"in the model directory's startup-hook.sh (python3 -m pip install {top})"
    )
