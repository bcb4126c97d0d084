"""The default images' pure parts: names per slot type, the missing-module line and message,
and what the cpu build asks pip for (the build itself: tests/docker, scripts/docker-setup)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.images import (
    DEFAULT_IMAGES,
    PACKAGES,
    default_image,
    missing_module,
    missing_module_message,
)
from agent.images.build import main, packages_digest, pip_args, torch_requirement


def test_one_default_image_per_slot_type() -> None:
    assert default_image(gpu=False) == DEFAULT_IMAGES["cpu"] == "detlab/pytorch:2.13.0-cpu"
    assert default_image(gpu=True) == DEFAULT_IMAGES["cuda"] == "detlab/pytorch:2.13.0-cuda"


@pytest.mark.parametrize(
    ("line", "module"),
    [
        ("ModuleNotFoundError: No module named 'numpy'", "numpy"),
        ("  ModuleNotFoundError: No module named 'sklearn.datasets'\n", "sklearn.datasets"),
        ("ImportError: No module named 'yaml'", "yaml"),
        ("print('ModuleNotFoundError: No module named x')", None),
        ("INFO: No module named 'numpy' is fine", None),
    ],
)
def test_missing_module_lines(line: str, module: str | None) -> None:
    assert missing_module(line) == module


def test_the_missing_module_message_names_module_image_and_ways_out() -> None:
    msg = missing_module_message("sklearn.datasets", "python:3.11-slim")
    assert "'sklearn.datasets', which the image python:3.11-slim does not have" in msg
    assert "an image that has 'sklearn'" in msg and DEFAULT_IMAGES["cpu"] in msg
    assert "startup-hook.sh (python3 -m pip install sklearn)" in msg


def test_the_cpu_build_asks_pip_for_bookworms_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_TORCH_WHEEL", "/w/torch-2.13.0+cpu-cp311-cp311-x.whl")
    assert torch_requirement() == "/w/torch-2.13.0+cpu-cp311-cp311-x.whl"
    args = pip_args(Path("/t"), [torch_requirement(), "numpy"])
    joined = " ".join(args)
    assert "--target /t --only-binary=:all: --platform manylinux_2_28_x86_64" in joined
    assert "--python-version 3.11 --implementation cp --abi cp311" in joined


def test_an_unknown_image_kind_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["gpu"])
    assert e.value.code == 2
    assert "unknown image gpu: choose from cpu, cuda" in capsys.readouterr().err


def test_the_images_carry_what_tensorboards_need_pinned_as_the_extras() -> None:
    """`det tensorboard` runs harness/tb_serve.py in the default image: tensorboard is in it,
    with pyproject's pin; the cuda Dockerfile asks for the same."""
    pins = {p.split(">")[0].split("=")[0]: p for p in PACKAGES}
    assert pins["tensorboard"] == "tensorboard>=2.21,<2.22"
    root = Path(__file__).resolve().parents[2]
    assert '"tensorboard>=2.21,<2.22"' in (root / "pyproject.toml").read_text()
    dockerfile = (root / "images" / "cuda.Dockerfile").read_text()
    assert all(f'"{p}"' in dockerfile for p in PACKAGES), dockerfile


def test_an_image_built_with_other_packages_is_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest labels the image; an image whose label differs (built before a package was
    added) is rebuilt instead of taken for current because its tag exists."""
    import agent.images.build as build

    digest = packages_digest()
    assert len(digest) == 16 and packages_digest() == digest
    monkeypatch.setattr(build, "PACKAGES", (*PACKAGES, "extra>=1"))
    assert packages_digest() != digest
    monkeypatch.undo()

    built: list[str] = []
    monkeypatch.setattr(build, "image_exists", lambda image: True)
    monkeypatch.setattr(build, "build_cpu", lambda image, started: built.append(image))
    for label, rebuilt in ((packages_digest(), False), ("0123456789abcdef", True), (None, True)):
        built.clear()
        monkeypatch.setattr(build, "image_label", lambda image, key, v=label: v)
        build.ensure("cpu")
        assert built == ([DEFAULT_IMAGES["cpu"]] if rebuilt else []), label


def test_a_per_device_image_is_picked_by_the_slots_the_agent_gives() -> None:
    # Determined's {cpu: ..., cuda: ...} stays whole in the config (detlab/expconf): a trial
    # with slots_per_trial 1 on a CPU agent runs the cpu image, on a GPU slot the cuda one.
    from types import SimpleNamespace

    from agent.runtime.docker._build import ContainerBuilder

    builder = ContainerBuilder.__new__(ContainerBuilder)
    builder.ctx = SimpleNamespace(  # type: ignore[assignment]
        slots=[{"index": 0, "type": "cpu"}, {"index": 1, "type": "gpu"}]
    )
    per_device = {"image": {"cpu": "lab/cpu:1", "cuda": "lab/cuda:1"}}
    on_cpu = SimpleNamespace(environment=per_device, slot_indexes=(0,))
    on_gpu = SimpleNamespace(environment=per_device, slot_indexes=(1,))
    assert builder.image_of(on_cpu) == "lab/cpu:1"  # type: ignore[arg-type]
    assert builder.image_of(on_gpu) == "lab/cuda:1"  # type: ignore[arg-type]
