"""The `slurm:` section (detlab/expconf/_slurm.py) and what the Slurm RM makes of it (pure),
and `rendezvous_network_interface` (master/rm/slurm_config.py, agent/netif.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent.netif import interface_ipv4, rendezvous_env
from detlab.expconf import ConfigError, parse_experiment_config, validate_experiment_config
from detlab.expconf._slurm import owned_option, parse_slurm_section, section_set
from master.rm import slurm_cli as cli
from master.rm.slurm_config import SlurmConfigError, parse_slurm
from master.rm.slurm_gang import Gang, never_fits, one_node_never_fits, plan_gang

BASE: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpt"},
}
SUB = cli.Submission(
    task_id="7.abc", allocation_id="a-1", partition="gpu", slots=2, job_dir="/shared/jobs/a-1"
)


def test_the_section_is_typed_with_every_key() -> None:
    conf = parse_experiment_config(
        {**BASE, "slurm": {"slots_per_node": 2, "gpu_type": "a100", "sbatch_args": ["--mem=4G"]}}
    )
    assert conf.slurm.slots_per_node == 2 and conf.slurm.gpu_type == "a100"
    assert conf.slurm.sbatch_args == ("--mem=4G",)
    unset = parse_experiment_config(BASE).slurm
    assert unset.to_json() == {"slots_per_node": None, "gpu_type": None, "sbatch_args": []}
    assert not section_set(unset.to_json())


@pytest.mark.parametrize(
    ("section", "path", "words"),
    [
        ({"slots_per_node": "4"}, "slurm.slots_per_node", "integer"),
        ({"slots_per_node": 0}, "slurm.slots_per_node", ">= 1"),
        ({"gpu_type": 7}, "slurm.gpu_type", "string"),
        ({"gpu_type": "a100:2,gpu"}, "slurm.gpu_type", "not a GRES type"),
        ({"sbatch_args": "--mem=4G"}, "slurm.sbatch_args", "expected a list"),
        ({"sbatch_args": [4]}, "slurm.sbatch_args[0]", "expected a string"),
        ({"sbatch_args": ["--mem=1G", "--partition=x"]}, "slurm.sbatch_args[1]", "--partition"),
        ({"sbatch_args": ["/tmp/other.sh"]}, "slurm.sbatch_args[0]", "not an option"),
        ({"sbatch_args": ["--"]}, "slurm.sbatch_args[0]", "not an option"),
        ({"sbatch_args": ["--time", "10"]}, "slurm.sbatch_args[1]", "not an option"),
        ({"slot_per_node": 1}, "slurm.slot_per_node", "did you mean slots_per_node"),
    ],
)
def test_a_bad_section_names_its_path(section: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_experiment_config({**BASE, "slurm": section})
    assert e.value.path == path and words in e.value.message, str(e.value)


@pytest.mark.parametrize(
    ("arg", "owned"),
    [
        ("--partition=gpu", "partition"),
        ("--part=gpu", "partition"),  # sbatch expands unambiguous prefixes
        ("--j=x", "job-name"),
        ("--gres=gpu:8", "gres"),
        ("--gpus=2", "gpus"),
        ("--gpus-per-node=2", "gpus-per-node"),
        ("--nodes=3", "nodes"),
        ("--ntasks=3", "ntasks"),
        ("--job-name=x", "job-name"),
        ("--comment=detlab:other", "comment"),
        ("--output=/tmp/x", "output"),
        ("--signal=KILL@1", "signal"),
        ("--requeue", "requeue"),
        ("--uid=0", "uid"),
        ("--export=ALL", "export"),
        ("--wrap=id", "wrap"),
        ("--priority=99999", "priority"),
        ("--nice=-100", "nice"),
        ("--bbf=/etc/shadow", "bbf"),
        ("--nodefile=/etc/shadow", "nodefile"),
        ("-pgpu", "partition"),
        ("-N2", "nodes"),
        ("-HJname", "job-name"),  # a bundle of flags goes on to the next letter
        ("--time=10", None),
        ("--mem=4G", None),
        ("--ntasks-per-core=1", None),
        ("--gres-flags=enforce-binding", None),
        ("-t10", None),
        ("-Hs", None),
    ],
)
def test_owned_options(arg: str, owned: str | None) -> None:
    assert owned_option(arg) == owned


def test_sbatch_gets_the_users_options_first_and_typed_gpus() -> None:
    cfg = parse_slurm({"job_storage_root": "/j"}, "rm")
    sub = dataclasses.replace(SUB, gpu_type="fake", sbatch_args=("--time=5", "--mem=1G"))
    argv = cli.sbatch_argv(cfg, sub)
    assert argv[2:4] == ["--time=5", "--mem=1G"]  # detlab's own come later, and so win
    assert "--gres=gpu:fake:2" in argv and argv[-1] == "/shared/jobs/a-1/job.sh"
    tres = parse_slurm({"job_storage_root": "/j", "gres_supported": False}, "rm")
    assert "--gpus=fake:2" in cli.sbatch_argv(tres, sub)
    cpu = parse_slurm({"job_storage_root": "/j", "slot_type": "cpu"}, "rm")
    assert "--cpus-per-task=2" in cli.sbatch_argv(cpu, sub)  # a CPU pool has no GPU type
    gang = dataclasses.replace(sub, gang=Gang(2, 1))
    assert "--gres=gpu:fake:1" in cli.sbatch_argv(cfg, gang)
    assert "--gpus-per-node=fake:1" in cli.sbatch_argv(tres, gang)


@pytest.mark.parametrize(
    ("slots", "node_slots", "cap", "want"),
    [
        (2, 2, None, Gang(1, 2)),
        (2, 2, 1, Gang(2, 1)),  # the cap splits what would fit on one node
        (8, 4, 2, Gang(4, 2)),
        (6, 4, 4, Gang(2, 3)),
        (2, 2, 4, Gang(1, 2)),  # a cap above the node's size changes nothing
        (4, 0, 2, Gang(2, 2)),  # node size unknown: the cap alone splits
    ],
)
def test_slots_per_node_caps_the_split(slots: int, node_slots: int, cap: int, want: Gang) -> None:
    assert plan_gang(slots, node_slots, cap) == want


def test_a_capped_split_that_needs_more_nodes_never_fits_and_says_why() -> None:
    gang = plan_gang(2, 2, 1)
    why = never_fits(gang, 2, "low", 1, 1)
    assert why == (
        "2 slots need 2 nodes of 1 slot(s) each (slurm.slots_per_node: 1), and Slurm "
        "partition low has 1 node(s)"
    )


def test_a_command_above_its_slots_per_node_never_fits() -> None:
    assert one_node_never_fits("command", 2, None) is None
    assert one_node_never_fits("command", 2, 2) is None
    assert one_node_never_fits("notebook", 2, 1) == (
        "slurm.slots_per_node is 1 but the notebook needs 2 slots on its one node "
        "(only trials span nodes)"
    )


def test_rendezvous_network_interface_is_kept_and_checked() -> None:
    cfg = parse_slurm(
        {
            "job_storage_root": "/j",
            "rendezvous_network_interface": "ib0",
            "partition_overrides": {"eth": {"rendezvous_network_interface": "eth1"}},
        },
        "resource_manager",
    )
    assert cfg.rendezvous_interface_of("gpu") == "ib0"
    assert cfg.rendezvous_interface_of("eth") == "eth1"
    assert parse_slurm({"job_storage_root": "/j"}, "rm").rendezvous_interface_of("x") is None
    for bad in ("eth0; reboot", "a" * 16, 3):
        with pytest.raises(SlurmConfigError, match="rendezvous_network_interface"):
            parse_slurm({"job_storage_root": "/j", "rendezvous_network_interface": bad}, "rm")


def test_an_interfaces_ipv4_address() -> None:
    assert interface_ipv4("lo") == "127.0.0.1"
    assert interface_ipv4("detlab-nope0") is None
    assert interface_ipv4("") is None
    assert rendezvous_env("lo", "127.0.0.1") == {
        "DET_RENDEZVOUS_ADDR": "127.0.0.1",
        "NCCL_SOCKET_IFNAME": "lo",
        "GLOO_SOCKET_IFNAME": "lo",
    }


def test_the_launcher_posts_the_interfaces_address() -> None:
    from harness.launch._spawn import rendezvous_address

    env = rendezvous_env("eth9", "10.1.2.3")
    assert rendezvous_address(env, "http://10.9.9.9:8080") == "10.1.2.3"
    assert rendezvous_address({}, "http://127.0.0.1:8080") == "127.0.0.1"


def test_a_task_config_section_is_checked_too() -> None:
    from master.errors import BadRequest
    from master.services.task.task_config import split
    from master.states import TaskType

    kept, warnings = split({"slurm": {"sbatch_args": ["--mem=1G"]}}, TaskType.COMMAND)
    assert kept["slurm"] == parse_slurm_section({"sbatch_args": ["--mem=1G"]}) and not warnings
    with pytest.raises(BadRequest) as e:
        split({"slurm": {"sbatch_args": ["--export=ALL"]}}, TaskType.NOTEBOOK)
    assert "--export" in str(e.value)
    _, warned = split({"slurm": {"gpu_type": "a100"}}, TaskType.TENSORBOARD)
    assert warned and warned[0].startswith("slurm: ignored")


@pytest.mark.parametrize(
    ("section", "where", "says"),
    [
        ({"sbatch_args": ["--mem=1G"] * 65}, "slurm.sbatch_args", "at most 64 arguments"),
        ({"sbatch_args": ["--comment-x=" + "x" * 1100]}, "slurm.sbatch_args[0]", "1024 characters"),
        ({"sbatch_args": [[[["--mem=1G"]]]]}, "slurm.sbatch_args[0]", ""),
        ({"slots_per_node": 10**9}, "slurm.slots_per_node", ""),
        ({"gpu_type": {"a": {"b": {}}}}, "slurm.gpu_type", ""),
    ],
)
def test_oversized_or_nested_input_is_refused_naming_its_path(
    section: dict[str, Any], where: str, says: str
) -> None:
    # What an attacker's experiment config can put here: too many or too long arguments,
    # nested lists and objects where text belongs, an absurd slot count.
    with pytest.raises(ConfigError) as err:
        parse_slurm_section(section)
    assert where in str(err.value) and says in str(err.value), str(err.value)
