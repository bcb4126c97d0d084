"""The cloud SDKs and Optuna are pyproject.toml extras: what needs one says which to install, and
everything else (the master, the agent, shared_fs checkpoints, random search) works without."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from master.config import MasterConfigError, _provider
from master.searcher.model import unavailable


def hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make `names` (and their submodules) look uninstalled to find_spec."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        if name.split(".")[0] in names:
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_samplers_tpe_and_gp_name_the_optuna_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "optuna")
    for sampler in ("tpe", "gp"):
        why = unavailable(sampler)
        assert why and f"sampler {sampler} needs Optuna" in why and "detlab[optuna]" in why
    assert unavailable("random") is None


@pytest.mark.parametrize(
    ("provider", "library"),
    [
        ({"type": "aws", "image_id": "ami-1", "instance_type": "g4dn.xlarge"}, "boto3"),
        ({"type": "gcp", "project": "p", "zone": "z"}, "google"),
    ],
)
def test_an_elastic_pool_names_its_cloud_extra(
    monkeypatch: pytest.MonkeyPatch, provider: dict, library: str
) -> None:
    hide(monkeypatch, "boto3", "google")
    with pytest.raises(MasterConfigError) as e:
        _provider(provider, "resource_pools[0].provider")
    assert f"needs {library}" in str(e.value), e.value
    assert f"pip install 'detlab[{provider['type']}]'" in str(e.value)


def test_master_agent_cli_and_shared_fs_work_without_the_extras() -> None:
    """In a fresh interpreter where boto3, google and optuna cannot be imported."""
    code = textwrap.dedent(
        """
        import sys
        for name in ("boto3", "botocore", "s3transfer", "google", "optuna"):
            sys.modules[name] = None  # import fails as if not installed
        import master.app, master.main, agent.main, harness.cli.main, harness.storage
        from harness.storage import build
        build({"type": "shared_fs", "host_path": sys.argv[1]})
        try:
            build({"type": "s3", "bucket": "b"})
        except NotImplementedError as e:
            print(e)
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "/tmp"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "checkpoint_storage.type 's3' is not available" in r.stdout, r.stdout
    assert "pip install 'detlab[aws]'" in r.stdout
