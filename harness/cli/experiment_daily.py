"""The `det experiment` actions Determined users type every day: list-trials, wait, config,
archive/unarchive, download (checkpoints), download-model-def, move, delete-tb-files, and
`create --test` (a short test run)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from detlab.constants import TERMINAL_STATES
from harness.api.client import Client
from harness.cli._common import Cli, CliError, add_json_flag, print_json
from harness.cli._render import det_time, print_rows


def list_trials(cli: Cli, args: argparse.Namespace) -> int:
    trials = cli.client().list_experiment_trials(args.id)
    if args.json:
        print_json(cli, trials)
        return 0
    headers = ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    rows = [
        [
            t["id"],
            t["state"],
            json.dumps(t.get("hparams") or {}, indent=4),
            det_time(t.get("created_at")),
            det_time(t.get("ended_at")),
            t.get("steps_completed"),
        ]
        for t in trials
    ]
    print_rows(cli, headers, rows, args.csv)
    return 0


def wait_for(client: Client, exp_id: int, interval: float) -> str:
    """Poll until the experiment ends; its final state."""
    while True:
        state = str(client.get_experiment(exp_id)["state"])
        if state in TERMINAL_STATES:
            return state
        time.sleep(interval)


def wait(cli: Cli, args: argparse.Namespace) -> int:
    """Exit 0 when it ends COMPLETED, 1 otherwise (as Determined's `det e wait`)."""
    state = wait_for(cli.client(), args.id, max(args.polling_interval, 0.1))
    cli.out.write(f"Experiment {args.id} is {state}\n")
    return 0 if state == "COMPLETED" else 1


def show_config(cli: Cli, args: argparse.Namespace) -> int:
    config = cli.client().get_experiment_config(args.id)["config"]
    if args.json:
        print_json(cli, config)
    else:
        yaml.safe_dump(config, cli.out, default_flow_style=False, sort_keys=False)
    return 0


def _archive(archived: bool) -> Any:
    def handler(cli: Cli, args: argparse.Namespace) -> int:
        cli.client().patch_experiment(args.id, archived=archived)
        cli.out.write(f"{'Archived' if archived else 'Unarchived'} experiment {args.id}\n")
        return 0

    return handler


def download_model_def(cli: Cli, args: argparse.Namespace) -> int:
    """The model definition as Determined writes it: `experiment_ID_model_def.tgz`."""
    data = cli.client().get_model_def(args.id)
    dest = Path(args.output_dir) / f"experiment_{args.id}_model_def.tgz"
    dest.write_bytes(data)
    cli.out.write(f"Downloaded the model definition of experiment {args.id} to {dest}\n")
    return 0


def download(cli: Cli, args: argparse.Namespace) -> int:
    """The experiment's best `--top-n` checkpoints, each into OUTPUT_DIR/UUID."""
    from harness._ckpt_io import ranked_checkpoints
    from harness.storage.fetch import download as fetch

    if args.sort_by is not None and args.smaller_is_better is None:
        raise CliError("--sort-by needs --smaller-is-better true|false")
    client = cli.client()
    try:
        best = ranked_checkpoints(
            client,
            args.id,
            sort_by=args.sort_by,
            smaller_is_better=args.smaller_is_better,
            limit=args.top_n,
        )
    except ValueError as e:
        raise CliError(str(e)) from e
    best = [c for c in best if c.get("state") in (None, "ACTIVE", "COMPLETED")]
    if not best:
        raise CliError(f"experiment {args.id} has no checkpoint to download")
    for c in best:
        try:
            dest, _how = fetch(client, c["uuid"], Path(args.output_dir) / c["uuid"])
        except FileNotFoundError as e:
            raise CliError(str(e)) from e
        if args.quiet:
            cli.out.write(f"{dest}\n")
        else:
            cli.out.write(
                f"Local checkpoint path: {dest}\n  trial {c.get('trial_id')}, "
                f"{c.get('steps_completed')} batches, uuid {c['uuid']}\n"
            )
    return 0


def move(cli: Cli, args: argparse.Namespace) -> int:
    from harness._sdk_registry import DEFAULT_PROJECT, DEFAULT_WORKSPACE, no_projects

    cli.client().get_experiment(args.id)
    if (args.workspace_name, args.project_name) != (DEFAULT_WORKSPACE, DEFAULT_PROJECT):
        raise CliError(no_projects(f"{args.workspace_name}/{args.project_name}"))
    cli.out.write(
        f"Experiment {args.id} is in {DEFAULT_WORKSPACE}/{DEFAULT_PROJECT} (nothing to move)\n"
    )
    return 0


def delete_tb_files(cli: Cli, args: argparse.Namespace) -> int:
    done = cli.client().delete_tensorboard_files(args.id)
    n = int(done.get("files_deleted", 0))
    cli.out.write(f"Deleted {n} TensorBoard file(s) of experiment {args.id}\n")
    return 0


def run_test(cli: Cli, client: Client, expanded: dict[str, Any], model_def: bytes | None) -> int:
    """Determined's `--test`: create the small test experiment, wait for it, say how far it
    got; archived once it ended (it is not a real result)."""
    from harness.cli._testmode import make_test_config, stage_marks

    text = yaml.safe_dump(make_test_config(expanded), sort_keys=False)
    exp_id = int(client.submit_experiment(text, model_def)["experiment"]["id"])
    cli.out.write(f"Created test experiment {exp_id}\n")
    cli.out.flush()
    state = wait_for(client, exp_id, 0.5)
    trials = client.list_experiment_trials(exp_id)
    trial = trials[0] if trials else {}
    trained = bool(trial and client.trial_metrics(trial["id"], group="training", limit=1)) or bool(
        trial.get("steps_completed")
    )
    validated = bool(trial and client.trial_metrics(trial["id"], group="validation", limit=1))
    checkpointed = bool(client.list_checkpoints(experiment_id=exp_id))
    cli.out.write(stage_marks(bool(trial), trained, validated, checkpointed) + "\n")
    client.patch_experiment(exp_id, archived=True)
    if state == "COMPLETED":
        cli.out.write("Model definition test succeeded! 🎉\n")
        return 0
    if trial:
        from harness.cli.experiment import print_all_experiment_logs

        print_all_experiment_logs(client, exp_id)
        print(
            f"Model definition test (experiment {exp_id}) ended {state}. To see its logs "
            f"again, run: det trial logs {trial['id']}",
            file=sys.stderr,
        )
    return 1


def register_daily(s: argparse._SubParsersAction) -> None:
    x = s.add_parser("list-trials", aliases=["lt"], help="the experiment's trials")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--csv", action="store_true", help="print as CSV")
    add_json_flag(x)
    x.set_defaults(func=list_trials)

    x = s.add_parser("wait", help="wait until the experiment ends (exit 1 unless COMPLETED)")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--polling-interval", type=float, default=5, metavar="SECONDS")
    x.set_defaults(func=wait)

    x = s.add_parser("config", help="the experiment's config (YAML)")
    x.add_argument("id", type=int, metavar="ID")
    add_json_flag(x)
    x.set_defaults(func=show_config)

    for name, archived in (("archive", True), ("unarchive", False)):
        x = s.add_parser(name, help=f"{name} an ended experiment (hidden from `list`)")
        x.add_argument("id", type=int, metavar="ID")
        x.set_defaults(func=_archive(archived))

    x = s.add_parser("download-model-def", help="the model definition as a .tgz")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--output-dir", default=".", metavar="DIR")
    x.set_defaults(func=download_model_def)

    x = s.add_parser("download", help="download the experiment's best checkpoints")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("-o", "--output-dir", default="checkpoints", metavar="DIR")
    x.add_argument("--top-n", type=int, default=1, metavar="N")
    x.add_argument("--sort-by", metavar="METRIC", help="default: the searcher metric")
    x.add_argument("--smaller-is-better", type=_strtobool, default=None, metavar="true|false")
    x.add_argument("-q", "--quiet", action="store_true", help="print only the paths")
    x.set_defaults(func=download)

    x = s.add_parser("move", help="move to a workspace/project (detlab has only the default)")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("workspace_name")
    x.add_argument("project_name")
    x.set_defaults(func=move)

    x = s.add_parser("delete-tb-files", help="delete the experiment's TensorBoard files")
    x.add_argument("id", type=int, metavar="ID")
    x.set_defaults(func=delete_tb_files)


def _strtobool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("y", "yes", "t", "true", "on", "1"):
        return True
    if v in ("n", "no", "f", "false", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")
