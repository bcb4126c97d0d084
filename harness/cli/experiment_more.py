"""More `det experiment` forms Determined users type: list-checkpoints, download, set, label,
continue."""

from __future__ import annotations

import argparse
import io
import tarfile
from pathlib import Path

from harness.cli._common import Cli, CliError, add_json_flag


def list_checkpoints(cli: Cli, args: argparse.Namespace) -> int:
    from harness.cli.checkpoint import list_checkpoints as ckpt_list

    args.experiment, args.trial = args.id, None
    return ckpt_list(cli, args)


def download(cli: Cli, args: argparse.Namespace) -> int:
    """The experiment's model definition, unpacked into OUTPUT (default: ./experiment_ID)."""
    data = cli.client().get_model_def(args.id)
    dest = Path(args.output or f"experiment_{args.id}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    cli.out.write(f"Downloaded the model definition of experiment {args.id} to {dest}\n")
    return 0


def set_field(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    field, value = args.field, args.value
    if field in ("priority", "weight"):
        try:
            number: float = int(value) if field == "priority" else float(value)
        except ValueError:
            raise CliError(f"{field} must be a number, not {value!r}") from None
        client.update_job(str(args.id), **{field: number})
    elif field == "max-slots":
        try:
            slots = None if value.lower() in ("none", "null", "") else int(value)
        except ValueError:
            raise CliError(f"max-slots must be an integer, not {value!r}") from None
        client.patch_experiment(args.id, max_slots=slots)
    else:
        client.patch_experiment(args.id, **{field: value})
    cli.out.write(f"Set {field} of experiment {args.id} to {value}\n")
    return 0


def label(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    labels = list(client.get_experiment(args.id).get("labels") or [])
    if args.op == "add" and args.label not in labels:
        labels.append(args.label)
    elif args.op == "remove":
        if args.label not in labels:
            raise CliError(f"experiment {args.id} has no label {args.label!r}")
        labels.remove(args.label)
    client.patch_experiment(args.id, labels=labels)
    verb = "Added" if args.op == "add" else "Removed"
    cli.out.write(f"{verb} label {args.label} {'to' if args.op == 'add' else 'from'} {args.id}\n")
    return 0


def continue_experiment(cli: Cli, args: argparse.Namespace) -> int:
    """Train on from the latest checkpoint of a single-trial experiment: a new experiment with
    the same config (plus --config overrides) and files, whose trial starts from it."""
    import yaml

    from harness.api import NotFound
    from harness.cli._overrides import OverrideError, apply_overrides

    client = cli.client()
    trials = client.list_experiment_trials(args.id)
    if len(trials) != 1:
        raise CliError(
            f"experiment {args.id} has {len(trials)} trials; continue takes a single-trial one"
        )
    latest = trials[0].get("latest_checkpoint")
    if not latest:
        raise CliError(f"trial {trials[0]['id']} of experiment {args.id} has no checkpoint yet")
    config = client.get_experiment_config(args.id)["original"]
    try:
        raw = apply_overrides(yaml.safe_load(config), args.config_overrides)
    except OverrideError as e:
        raise CliError(str(e)) from e
    searcher = raw.setdefault("searcher", {})
    searcher["source_checkpoint_uuid"] = latest
    try:
        model_def: bytes | None = client.get_model_def(args.id)
    except NotFound:
        model_def = None
    body = client.submit_experiment(yaml.safe_dump(raw, sort_keys=False), model_def)
    new = body["experiment"]["id"]
    cli.out.write(f"Continued experiment {args.id} from checkpoint {latest}\n")
    cli.out.write(f"Created experiment {new}\n")
    return 0


def register_more(s: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Adds continue, download, set, label, ...; returns `set`'s fields (others add to it)."""
    x = s.add_parser("continue", help="train a single-trial experiment on from its checkpoint")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (e.g. hyperparameters.max_length=200)",
    )
    x.set_defaults(func=continue_experiment)

    x = s.add_parser("list-checkpoints", help="the experiment's checkpoints")
    x.add_argument("id", type=int, metavar="ID")
    add_json_flag(x)
    x.set_defaults(func=list_checkpoints)

    x = s.add_parser("download", help="download the experiment's model definition")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("-o", "--output-dir", dest="output", metavar="DIR")
    x.set_defaults(func=download)

    x = s.add_parser("set", help="set description|name|max-slots|priority|weight")
    fields = x.add_subparsers(dest="field", metavar="FIELD", required=True)
    for name in ("description", "name", "max-slots", "priority", "weight"):
        f = fields.add_parser(name)
        f.add_argument("id", type=int, metavar="ID")
        f.add_argument("value", metavar="VALUE")
        f.set_defaults(func=set_field)

    x = s.add_parser("label", help="add or remove a label")
    ops = x.add_subparsers(dest="op", metavar="add|remove", required=True)
    for op in ("add", "remove"):
        o = ops.add_parser(op)
        o.add_argument("id", type=int, metavar="ID")
        o.add_argument("label", metavar="LABEL")
        o.set_defaults(func=label)
    return fields
