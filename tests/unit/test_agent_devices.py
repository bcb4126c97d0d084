"""Slot discovery (--slots, the CPU fallback) and slot statistics."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from agent import devices


@pytest.fixture
def fresh_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget what devices learned about NVML, so a test can present its own pynvml."""
    monkeypatch.setattr(devices, "_nvml", None)
    monkeypatch.setattr(devices, "_nvml_failed", None)


def test_cpu_slots_from_flag() -> None:
    slots = devices.discover_slots(3)
    assert [s["index"] for s in slots] == [0, 1, 2]
    assert [s["uuid"] for s in slots] == ["cpu-0", "cpu-1", "cpu-2"]
    assert {s["type"] for s in slots} == {"cpu"}
    assert all(s["name"] for s in slots)
    total = devices.total_memory_mb()
    assert total > 0
    assert slots[0]["memory_mb"] == total // 3


def test_zero_slots_is_an_error() -> None:
    with pytest.raises(ValueError):
        devices.discover_slots(0)


def test_without_nvidia_one_cpu_slot(
    fresh_nvml: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = types.ModuleType("pynvml")

    def nvml_init() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    broken.nvmlInit = nvml_init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    with caplog.at_level(logging.INFO, logger="agent.devices"):
        slots = devices.discover_slots(None)
    assert len(slots) == 1
    assert slots[0]["type"] == "cpu" and slots[0]["uuid"] == "cpu-0"
    assert "NVML Shared Library Not Found" in caplog.text
    # GPU statistics on a box without NVML are simply empty, never an exception.
    assert devices._gpu_stats(0) == {}


def test_pynvml_not_installed(fresh_nvml: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    slots, why = devices.gpu_slots()
    assert slots == [] and why and "pynvml" in why
    assert devices.discover_slots(None)[0]["type"] == "cpu"


def test_gpus_from_nvml(fresh_nvml: None, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("pynvml")
    mem = types.SimpleNamespace(total=16 * 1024**3, used=1024**3)
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = lambda h: mem  # type: ignore[attr-defined]
    fake.nvmlDeviceGetUUID = lambda h: f"GPU-{h}".encode()  # type: ignore[attr-defined]
    fake.nvmlDeviceGetName = lambda h: "Tesla T4"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=42)  # type: ignore[attr-defined]
    fake.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    fake.nvmlDeviceGetTemperature = lambda h, kind: 61  # type: ignore[attr-defined]

    def no_power(h: int) -> int:
        raise RuntimeError("Not Supported")

    fake.nvmlDeviceGetPowerUsage = no_power  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    slots = devices.discover_slots(None)
    assert slots == [
        {"index": 0, "type": "gpu", "uuid": "GPU-0", "name": "Tesla T4", "memory_mb": 16384},
        {"index": 1, "type": "gpu", "uuid": "GPU-1", "name": "Tesla T4", "memory_mb": 16384},
    ]
    stats = devices.sample_stats(slots)
    assert stats[1] == {"util_percent": 42.0, "memory_used_mb": 1024, "temperature_c": 61.0}


def test_cpu_stats() -> None:
    slots = devices.discover_slots(2)
    first = devices.sample_stats(slots)
    sum(i * i for i in range(200_000))  # some CPU time between the samples
    second = devices.sample_stats(slots)
    for stats in (first, second):
        assert len(stats) == 2
        assert 0.0 <= stats[0]["util_percent"] <= 100.0
        assert stats[0]["memory_used_mb"] > 0
        assert stats[0] == stats[1]
