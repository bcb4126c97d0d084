"""Printing result tables and keeping docs/benchmarks.md up to date (one section per benchmark)."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"
HEADER = """# Benchmarks

Refreshed by `python bench/run.py [NAME ...]` (see `bench/README.md`): each run replaces its
benchmark's section below. Raw results are kept in `bench/results/` (not committed).
"""

Row = tuple[str, str, str]  # figure, value, target


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU model and whether it has AVX-512.

    torch and numpy pick their kernels by instruction set, so model-based search figures can
    differ in their last bits between machines with and without AVX-512.
    """
    fallback = platform.processor() or platform.machine()
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return fallback
    models = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    avx512 = any(ln.startswith("flags") and "avx512f" in ln.split() for ln in lines)
    return f"{models[0] if models else fallback} ({'with' if avx512 else 'no'} AVX-512)"


def machine() -> str:
    """One line describing where the benchmark ran."""
    cpu_ = cpu()
    mem = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    pg = ""
    try:
        out = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "show server_version"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        pg = f", PostgreSQL {out.stdout.split()[0]}" if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return (
        f"{platform.node()}: {cpu_}, {os.cpu_count()} cores{mem}, "
        f"Python {platform.python_version()}{pg}"
    )


def table(rows: list[Row]) -> str:
    """A plain-text table for the terminal."""
    head: Row = ("figure", "value", "target")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    out = ["| figure | value | target |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out)


def publish(name: str, summary: str, rows: list[Row], raw: dict, docs: bool = True) -> None:
    """Print the table, save the raw results, and refresh `name`'s section of the docs."""
    print(f"\n== {name} ==\n{summary}\n\n{table(rows)}\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw_path = RESULTS / f"{name}-{stamp}.json"
    raw_path.write_text(json.dumps(raw, indent=2, default=str))
    shown = raw_path.relative_to(ROOT) if raw_path.is_relative_to(ROOT) else raw_path
    print(f"raw results: {shown}")
    if docs:
        write_section(name, summary, rows)


def write_section(name: str, summary: str, rows: list[Row], stamp: str | None = None) -> None:
    """Replace (or append) `name`'s section of docs/benchmarks.md.

    `stamp` (default: now, on this machine) says where the figures come from; a section
    assembled from runs on other machines passes its own.
    """
    if stamp is None:
        stamp = f"{time.strftime('%Y-%m-%d %H:%M %Z')} on {machine()}"
    section = (
        f"<!-- bench:{name}:start -->\n## {name}\n\n"
        f"_{stamp}_\n\n{summary}\n\n{markdown(rows)}\n"
        f"<!-- bench:{name}:end -->"
    )
    text = DOCS.read_text() if DOCS.exists() else HEADER
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)}:start -->.*?<!-- bench:{re.escape(name)}:end -->", re.S
    )
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(text)
    print(f"updated {DOCS} ({name})")
