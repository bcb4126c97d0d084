"""Slot discovery and live slot statistics.

A slot is what the scheduler hands out: one GPU, or one (artificial) CPU slot. GPUs come from
NVML; an agent without an NVIDIA driver still joins the cluster with one CPU slot, because a
missing driver is the normal state of a CPU box, not an error. NVML trouble never crashes the agent.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
import warnings
from typing import Any

log = logging.getLogger(__name__)

Slot = dict[str, Any]

_nvml_lock = threading.Lock()
_nvml: Any = None  # the pynvml module once nvmlInit succeeded
_nvml_failed: str | None = None  # why NVML is unusable, once we know


def _load_nvml() -> tuple[Any, str | None]:
    """Import and initialise pynvml once; return (module or None, reason when None)."""
    global _nvml, _nvml_failed
    with _nvml_lock:
        if _nvml is not None or _nvml_failed is not None:
            return _nvml, _nvml_failed
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pynvml warns that it is a deprecated alias
                import pynvml
        except Exception as e:  # ImportError, or a broken install
            _nvml_failed = f"pynvml is not importable ({e})"
            return None, _nvml_failed
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError: library not found, driver not loaded, ...
            _nvml_failed = f"NVML is unavailable ({e})"
            return None, _nvml_failed
        _nvml = pynvml
        return _nvml, None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def cpu_model_name() -> str:
    """The CPU model, for slot names: /proc/cpuinfo on Linux, else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _meminfo_mb() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) // 1024  # kB -> MB
    except OSError:
        pass
    return out


def total_memory_mb() -> int:
    """Physical memory of the machine in MB (0 when unknown)."""
    info = _meminfo_mb()
    if "MemTotal" in info:
        return info["MemTotal"]
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return 0


def cpu_slots(n: int) -> list[Slot]:
    """N artificial CPU slots that share the machine's memory evenly."""
    name = cpu_model_name()
    mem = total_memory_mb() // max(n, 1)
    return [
        {"index": i, "type": "cpu", "uuid": f"cpu-{i}", "name": name, "memory_mb": mem}
        for i in range(n)
    ]


def gpu_slots() -> tuple[list[Slot], str | None]:
    """One slot per NVIDIA GPU; ([], reason) when there are none or NVML fails."""
    nvml, why = _load_nvml()
    if nvml is None:
        return [], why
    try:
        slots = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            slots.append(
                {
                    "index": i,
                    "type": "gpu",
                    "uuid": _text(nvml.nvmlDeviceGetUUID(h)),
                    "name": _text(nvml.nvmlDeviceGetName(h)),
                    "memory_mb": int(mem.total) // (1024 * 1024),
                }
            )
    except Exception as e:
        return [], f"NVML failed while listing GPUs ({e})"
    if not slots:
        return [], "NVML found no GPUs"
    return slots, None


def discover_slots(num_cpu_slots: int | None = None) -> list[Slot]:
    """The agent's slots: `--slots N` CPU slots, else the GPUs, else one CPU slot."""
    if num_cpu_slots is not None:
        if num_cpu_slots < 1:
            raise ValueError("--slots must be at least 1")
        return cpu_slots(num_cpu_slots)
    slots, why = gpu_slots()
    if slots:
        return slots
    log.info("no GPUs: %s; offering one CPU slot", why)
    return cpu_slots(1)


class _CpuTimes:
    """Whole-machine CPU busy percentage from /proc/stat deltas between samples.

    Two polls can follow each other within milliseconds (a state change right after a heartbeat);
    a delta that short is noise, so the previous figure is kept until MIN_INTERVAL has passed.
    """

    MIN_INTERVAL = 0.5

    def __init__(self) -> None:
        self._prev: tuple[int, int] | None = None
        self._prev_at = 0.0
        self._last: float | None = None
        self._lock = threading.Lock()

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            with open("/proc/stat", encoding="utf-8") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if not fields or fields[0] != "cpu":
            return None
        values = [int(v) for v in fields[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        total = sum(values[:8])  # guest time is already counted in user/nice
        return total, idle

    def percent(self) -> float | None:
        with self._lock:
            now_t = time.monotonic()
            if self._last is not None and now_t - self._prev_at < self.MIN_INTERVAL:
                return self._last
            now = self._read()
            if now is None:
                return None
            prev, self._prev, self._prev_at = self._prev, now, now_t
            total, idle = now
            if prev is not None and total > prev[0]:
                total, idle = total - prev[0], idle - prev[1]
            if total <= 0:
                return self._last
            self._last = round(100.0 * (total - idle) / total, 1)
            return self._last


_cpu_times = _CpuTimes()


def _gpu_stats(index: int) -> dict[str, Any]:
    nvml, _ = _load_nvml()
    if nvml is None:
        return {}
    out: dict[str, Any] = {}
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return out
    probes = {
        "util_percent": lambda: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
        "memory_used_mb": lambda: int(nvml.nvmlDeviceGetMemoryInfo(h).used) // (1024 * 1024),
        "temperature_c": lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        "power_w": lambda: round(nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 1),
    }
    for key, probe in probes.items():
        try:
            out[key] = probe()
        except Exception:  # not supported on this GPU, or a transient NVML error
            pass
    return out


def sample_stats(slots: list[Slot]) -> list[dict[str, Any]]:
    """Current statistics for each slot, in the slots' order.

    GPU slots: util_percent, memory_used_mb, temperature_c, power_w (whichever NVML gives).
    CPU slots: util_percent (whole-machine CPU busy since the previous sample) and
    memory_used_mb (whole-machine); artificial CPU slots share one machine, so they agree.
    """
    cpu: dict[str, Any] | None = None
    out: list[dict[str, Any]] = []
    for slot in slots:
        if slot.get("type") == "gpu":
            out.append(_gpu_stats(int(slot["index"])))
            continue
        if cpu is None:
            cpu = {}
            pct = _cpu_times.percent()
            if pct is not None:
                cpu["util_percent"] = pct
            info = _meminfo_mb()
            if "MemTotal" in info and "MemAvailable" in info:
                cpu["memory_used_mb"] = info["MemTotal"] - info["MemAvailable"]
        out.append(dict(cpu))
    return out
