"""More `det experiment` forms Determined users type: list-checkpoints, set, label, continue."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, CliError, print_json, size
from harness.cli._render import print_rows


def list_checkpoints(cli: Cli, args: argparse.Namespace) -> int:
    """`det e lc ID [--best N] [--csv]`: Determined's columns with --csv or --best (the
    validation metric shown is the searcher metric at the checkpoint's step)."""
    from harness.cli.checkpoint import list_checkpoints as ckpt_list

    if args.best is None and not args.csv:
        args.experiment, args.trial = args.id, None
        return ckpt_list(cli, args)
    from harness._ckpt_io import ranked_checkpoints, validation_metrics

    client = cli.client()
    exp = client.get_experiment(args.id)
    if args.best is not None:
        ckpts = ranked_checkpoints(client, args.id, limit=args.best, validated_only=True)
    else:
        ckpts = sorted(
            client.list_checkpoints(experiment_id=args.id),
            key=lambda c: str(c.get("reported_at") or ""),
        )
    if args.json:
        print_json(cli, ckpts)
        return 0
    metric = exp.get("searcher_metric") or ""
    values = validation_metrics(client, ckpts)
    headers = ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources"]
    rows = [
        [c.get("trial_id"), c.get("steps_completed"), c.get("state")]
        + [(values.get(c["uuid"]) or {}).get(metric), c["uuid"]]
        + ["\n".join(sorted((c.get("resources") or {}).keys()))]
        + [size(sum((c.get("resources") or {}).values()))]
        for c in ckpts
    ]
    print_rows(cli, [*headers, "Size"], rows, args.csv)
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
    """Determined 0.38's `det e continue`: the ended single-trial experiment becomes ACTIVE
    again and its same trial (same id, metrics and checkpoints) trains on from its latest
    checkpoint; --config-file and --config overrides are merged over its config."""
    import yaml

    from harness.cli._overrides import OverrideError, apply_overrides

    override: dict = {}
    if args.config_file is not None:
        with args.config_file as f:
            loaded = yaml.safe_load(f.read())
        if loaded is not None and not isinstance(loaded, dict):
            raise CliError(f"{args.config_file.name}: the config must be a mapping")
        override = loaded or {}
    try:
        override = apply_overrides(override, args.config_overrides)
    except OverrideError as e:
        raise CliError(str(e)) from e
    text = yaml.safe_dump(override, sort_keys=False) if override else None
    client = cli.client()
    client.continue_experiment(args.id, text)
    cli.out.write(f"Continued experiment {args.id}\n")
    if args.follow_first_trial:
        from harness.cli._follow import follow_experiment

        return 0 if follow_experiment(client, args.id) == "COMPLETED" else 1
    return 0


def register_more(s: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Adds continue, download, set, label, ...; returns `set`'s fields (others add to it)."""
    x = s.add_parser(
        "continue",
        help="train an ended experiment's trial (or a grid/random search's unfinished ones) on",
    )
    x.add_argument("id", type=int, metavar="ID")
    # Determined 0.38.1 spells it `--config-file FILE`; the positional form is detlab's own.
    files = x.add_mutually_exclusive_group()
    files.add_argument("config_file", nargs="?", type=argparse.FileType("r"), metavar="CONFIG_FILE")
    files.add_argument(
        "--config-file",
        dest="config_file",
        type=argparse.FileType("r"),
        metavar="FILE",
        help="experiment config overrides (.yaml)",
    )
    x.add_argument("-f", "--follow-first-trial", action="store_true", help="follow its logs")
    x.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (e.g. hyperparameters.max_length=200)",
    )
    x.set_defaults(func=continue_experiment)

    x = s.add_parser("list-checkpoints", aliases=["lc"], help="the experiment's checkpoints")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument(
        "--best",
        type=int,
        metavar="N",
        help="the best N by the searcher metric (only checkpoints with a validation)",
    )
    fmt = x.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print as CSV (Determined's columns)")
    fmt.add_argument("--json", action="store_true", help="print machine-readable JSON")
    x.set_defaults(func=list_checkpoints)

    x = s.add_parser("set", help="set description|name|max-slots|priority|weight")
    fields = x.add_subparsers(dest="field", metavar="FIELD", required=True)
    for name in ("description", "name", "max-slots", "priority", "weight"):
        f = fields.add_parser(name, help=f"set the experiment's {name.replace('-', ' ')}")
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
