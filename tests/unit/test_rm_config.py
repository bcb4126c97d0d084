"""The master config's resource managers, Determined 0.38's way: `resource_manager:` and
`additional_resource_managers:`; configs without them keep working; mistakes are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config import MasterConfigError, load_master_config


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "master.yaml"
    p.write_text(text)
    return load_master_config(p)


def test_a_config_without_resource_managers_is_one_agent_rm(tmp_path: Path) -> None:
    cfg = load(tmp_path, "resource_pools: [{name: a}, {pool_name: b}]\n")
    assert [(r.name, r.type) for r in cfg.resource_managers] == [("default", "agent")]
    assert [(p.name, p.resource_manager) for p in cfg.resource_pools] == [
        ("a", "default"),
        ("b", "default"),
    ]
    assert load(tmp_path, "port: 8081\n").pool_names() == ["default"]


def test_additional_resource_managers_own_their_pools(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        """
resource_manager: {type: agent, default_compute_resource_pool: a}
resource_pools: [{name: a}]
additional_resource_managers:
  - resource_manager: {type: agent, name: lab-b}
    resource_pools: [{pool_name: b, scheduler: {type: fair_share}}, {name: c}]
""",
    )
    assert [r.name for r in cfg.resource_managers] == ["default", "lab-b"]
    owners = {p.name: p.resource_manager for p in cfg.resource_pools}
    assert owners == {"a": "default", "b": "lab-b", "c": "lab-b"}
    assert cfg.resource_managers[0].default_compute_resource_pool == "a"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("resource_manager: {type: pbs}\n", "resource_manager.type"),
        ("resource_manager: agent\n", "resource_manager must be a mapping"),
        ("resource_manager: {type: agent, color: red}\n", "'color'"),
        (
            "additional_resource_managers: [{resource_manager: {type: agent}, "
            "resource_pools: [{name: b}]}]\n",
            "needs a name",
        ),
        (
            "additional_resource_managers: [{resource_manager: {type: agent, name: x}}]\n",
            "needs its pools",
        ),
        (
            "additional_resource_managers: [{resource_manager: {type: agent, name: x}, "
            "resource_pools: [{name: default}]}]\n",
            "resource pool 'default' is in resource managers 'default' and 'x'",
        ),
        (
            "additional_resource_managers: [{resource_manager: {type: agent, name: default}, "
            "resource_pools: [{name: b}]}]\n",
            "two resource managers are named 'default'",
        ),
        (
            "resource_manager: {type: agent, default_aux_resource_pool: elsewhere}\n",
            "default_aux_resource_pool 'elsewhere' is not one of its pools",
        ),
        (
            "additional_resource_managers: [{resource_manager: {type: agent, name: x}, "
            "resource_pools: []}]\n",
            "additional_resource_managers[0].resource_pools must be a non-empty list",
        ),
        ("additional_resource_managers: {}\n", "additional_resource_managers must be a list"),
    ],
)
def test_mistakes_are_named(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(MasterConfigError, match=None) as e:
        load(tmp_path, text)
    assert named in str(e.value), str(e.value)
