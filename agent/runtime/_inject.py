"""What the Docker runtime injects into every trial container: the harness (with `detlab`, the
constants and protocol it shares with the master) and its pure-Python dependencies (requests,
urllib3, idna, certifi, charset_normalizer, tenacity), so that any image with a `python3` runs
trials; no detlab-specific image is needed.

The packages are copied once from the agent's own interpreter into
`<work-dir>/docker-inject/lib-<digest>/`, which every container mounts read-only and finds on its
PYTHONPATH. Only sources and data files are copied: compiled extensions are built for the agent's
Python and would not load (or worse, crash) in another one; every package listed here has a
pure-Python fallback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGES = (
    "harness",
    "detlab",
    "requests",
    "urllib3",
    "idna",
    "certifi",
    "charset_normalizer",
    "tenacity",
)
_SKIP_DIRS = frozenset({"__pycache__", "tests", "testing"})
_SKIP_SUFFIXES = (".so", ".pyd", ".pyc", ".pyo", ".dylib", ".dll")


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot inject {name!r} into containers: it is not importable here")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for f in sorted(filenames):
            if not f.endswith(_SKIP_SUFFIXES):
                out.append(Path(dirpath) / f)
    return out


def build_lib(base: Path, packages: tuple[str, ...] = PACKAGES) -> Path:
    """The directory to mount (read-only) and put on the containers' PYTHONPATH.

    Content-addressed: rebuilt only when a package changed. Older trees are removed by `prune`
    once no container mounts them (containers of an earlier agent run may)."""
    sources = [(name, package_dir(name)) for name in packages]
    digest = hashlib.sha256()
    listing: list[tuple[Path, Path]] = []
    for name, src in sources:
        for f in _files(src):
            rel = Path(name) / f.relative_to(src)
            digest.update(str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
            listing.append((f, rel))
    target = base / f"lib-{digest.hexdigest()[:16]}"
    if (target / ".complete").is_file():
        return target
    tmp = base / f".tmp-{os.getpid()}-{digest.hexdigest()[:8]}"
    shutil.rmtree(tmp, ignore_errors=True)
    for src, rel in listing:
        dest = tmp / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    (tmp / ".complete").write_text("\n".join(packages) + "\n")
    for p in tmp.rglob("*"):  # readable by any user the image runs as
        p.chmod(0o755 if p.is_dir() else 0o644)
    tmp.chmod(0o755)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    log.info("injected packages for containers prepared in %s", target)
    return target


def prune(base: Path, keep: set[Path]) -> None:
    """Remove injected trees that no container uses any more."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    keep_names = {p.name for p in keep}
    for p in entries:
        if p.name.startswith("lib-") and p.name not in keep_names:
            shutil.rmtree(p, ignore_errors=True)
