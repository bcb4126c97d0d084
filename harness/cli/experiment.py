"""`det experiment ...`: create (validate, pack, submit, follow), list, describe, control, logs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from harness.api.client import Client, trial_rung
from harness.cli._common import (
    Cli,
    CliError,
    Column,
    add_json_flag,
    cell,
    metric_value,
    percent,
    print_fields,
    print_json,
    print_table,
    trial_state,
    when,
)
from harness.cli._follow import LogTail, follow_experiment, print_log_line
from harness.cli._modeldef import build_model_def


def validate_config_text(text: str) -> dict:
    """Validate locally (the master's own schema, detlab.expconf) before any upload."""
    from detlab import expconf

    try:
        return expconf.validate_experiment_config(expconf.load_yaml(text))
    except expconf.ConfigError as e:
        raise CliError(f"{e.path}: {e.message}" if e.path else e.message) from e


def create(cli: Cli, args: argparse.Namespace) -> int:
    _check_create_flags(args)
    try:
        text = Path(args.config).read_text()
    except OSError as e:
        raise CliError(f"cannot read {args.config}: {e.strerror or e}") from e
    if args.config_overrides:
        import yaml

        from harness.cli._overrides import OverrideError, apply_overrides

        try:
            text = yaml.safe_dump(
                apply_overrides(yaml.safe_load(text), args.config_overrides), sort_keys=False
            )
        except (OverrideError, yaml.YAMLError) as e:
            raise CliError(str(e)) from e
    config = None
    if not args.template:  # with a template, the master validates the merged config
        config = validate_config_text(text)
    client = cli.client()
    if args.validate_only or args.test:
        body = client.submit_experiment(
            text,
            None,
            template=args.template,
            validate_only=True,
            fail_if_cannot_fit=args.fail_if_cannot_fit,
        )
        _warn(cli, body)
        if not args.test:
            cli.out.write("Experiment configuration is valid (nothing was created)\n")
            return 0
        cli.out.write("Experiment configuration validation succeeded\n")
    model_def = _pack(args)
    if config is not None and model_def is not None:  # the master checks too; saves the upload
        from detlab.entrypoint import missing_file_message, tar_names

        names = tar_names(model_def)
        message = missing_file_message(config["entrypoint"], names) if names is not None else None
        if message:
            raise CliError(f"entrypoint: {message} ({args.model_dir})")
    if args.test:
        import yaml

        from harness.cli.experiment_daily import run_test

        # The submitted keys (storage credentials included); with a template, the merge.
        base = body["config"] if args.template else yaml.safe_load(text)
        return run_test(cli, client, base, model_def)
    body = client.submit_experiment(
        text,
        model_def,
        activate=not args.paused,
        template=args.template,
        fail_if_cannot_fit=args.fail_if_cannot_fit,
    )
    _warn(cli, body)
    exp = body["experiment"]
    cli.out.write(f"Created experiment {exp['id']}\n")
    cli.out.write(f"Web page: {page_url(cli.master, exp['id'])}\n")
    cli.out.flush()
    if not args.follow:
        return 0
    return 0 if follow_experiment(client, exp["id"]) == "COMPLETED" else 1


def _pack(args: argparse.Namespace) -> bytes | None:
    """The model directory plus `-i` includes; None when neither is given (Determined's
    model definition is optional: the entrypoint is then in the image)."""
    if args.model_dir is None and not args.include:
        return None
    return build_model_def(args.model_dir, includes=args.include)


def _warn(cli: Cli, body: dict) -> None:
    import sys

    for w in body.get("warnings") or []:
        print(f"warning: {w}", file=sys.stderr)


def page_url(master: str, exp_id: int) -> str:
    """The experiment's page on the master's web UI."""
    return f"{master.rstrip('/')}/experiments/{exp_id}"


EXP_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("PROGRESS", lambda e: percent(e.get("progress"))),
    ("TRIALS", "num_trials"),
    ("BEST", "best_validation"),
    ("OWNER", "owner"),
    ("POOL", "resource_pool"),
    ("CREATED", lambda e: when(e.get("created_at"))),
    ("ENDED", lambda e: when(e.get("ended_at"))),
]

TRIAL_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("STATE", trial_state),
    ("STEPS", "steps_completed"),
    ("TARGET", "searcher_target"),
    ("PROGRESS", lambda t: percent(t.get("progress"))),
    ("BEST", "best_validation"),
    ("LATEST", "latest_metric"),  # the searcher metric of the latest validation
    ("RESTARTS", "restarts"),
    ("CHECKPOINT", "latest_checkpoint"),
    ("HPARAMS", lambda t: " ".join(f"{k}={cell(v)}" for k, v in (t.get("hparams") or {}).items())),
]


def _check_create_flags(args: argparse.Namespace) -> None:
    """Determined 0.38.1's flags detlab cannot honour fail naming why (not as a usage error)."""
    from harness._sdk_registry import DEFAULT_PROJECT, Project

    if args.project_id is not None and args.project_id != Project().id:
        raise CliError(
            f"--project_id {args.project_id}: detlab has one project, {DEFAULT_PROJECT!r} "
            f"(id {Project().id}); every experiment is in it"
        )
    if args.local:
        raise CliError(
            "--local is not supported: detlab runs experiments on the cluster "
            "(use --test to check a model definition there)"
        )
    if args.publish:
        raise CliError("-p/--publish is not supported: detlab does not proxy trial ports")


def list_experiments(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    user = None if args.all else client.me()["username"]
    # As Determined: archived experiments only with --all.
    archived = None if args.all else False
    exps = list(client.iter_experiments(state=args.state, user=user, archived=archived))
    if args.csv:
        from harness.cli._render import det_percent, det_time, print_csv

        headers = ["ID", "Owner", "Name", "Parent ID", "State", "Progress", "Started", "Ended"]
        headers += ["Resource Pool"] + (["Archived"] if args.all else [])
        rows = [
            [e["id"], e.get("owner"), e.get("name"), None, e.get("state")]
            + [det_percent(e.get("progress")), det_time(e.get("created_at"))]
            + [det_time(e.get("ended_at")), e.get("resource_pool")]
            + ([bool(e.get("archived"))] if args.all else [])
            for e in exps
        ]
        print_csv(cli, headers, rows)
    elif args.json:
        print_json(cli, exps)
    elif not exps and user is not None:
        state = f" {args.state}" if args.state else ""
        cli.out.write(
            f"No{state} experiments of {user}; `det experiment list --all` shows everyone's\n"
        )
    else:
        print_table(cli, exps, EXP_COLUMNS)
    return 0


def describe(cli: Cli, args: argparse.Namespace) -> int:
    """`det e describe ID` or, as Determined's, `ID1,ID2,...` (each in turn; `--json`: a list)."""
    ids: list[int] = args.id
    if len(ids) == 1:
        return _describe_one(cli, ids[0], args.json)
    if args.json:
        print_json(cli, [_detail(cli, exp_id) for exp_id in ids])
        return 0
    for i, exp_id in enumerate(ids):
        if i:
            cli.out.write("\n")
        _describe_one(cli, exp_id, False)
    return 0


def _ids(value: str) -> list[int]:
    try:
        ids = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an experiment ID or comma-separated IDs (1,2,3), not {value!r}"
        ) from None
    if not ids:
        raise argparse.ArgumentTypeError("expected an experiment ID")
    return list(dict.fromkeys(ids))


def _detail(cli: Cli, exp_id: int) -> dict:
    from harness.cli.experiment_gc import checkpoint_usage

    detail = cli.client().describe_experiment(exp_id)
    if (usage := checkpoint_usage(cli, exp_id)) is not None:
        detail["checkpoints"] = usage
    return detail


def _describe_one(cli: Cli, exp_id: int, as_json: bool) -> int:
    if as_json:
        print_json(cli, _detail(cli, exp_id))
        return 0
    detail = cli.client().describe_experiment(exp_id)
    exp = detail["experiment"]
    exp = {
        **exp,
        "progress": percent(exp.get("progress")),
        "created_at": when(exp.get("created_at")),
        "ended_at": when(exp.get("ended_at")),
        "web_page": page_url(cli.master, exp["id"]),
    }
    print_fields(
        cli,
        exp,
        [
            ("ID", "id"),
            ("Name", "name"),
            ("Description", "description"),
            ("State", "state"),
            ("Owner", "owner"),
            ("Progress", "progress"),
            ("Trials", "num_trials"),
            ("Searcher metric", "searcher_metric"),
            ("Smaller is better", "smaller_is_better"),
            ("Best trial", "best_trial_id"),
            ("Best validation", "best_validation"),
            ("Resource pool", "resource_pool"),
            ("Created", "created_at"),
            ("Ended", "ended_at"),
            ("Web page", "web_page"),
        ],
    )
    from harness.cli.experiment_gc import describe_checkpoints

    describe_checkpoints(cli, exp_id)
    cli.out.write("\n")
    lengths = detail.get("rung_lengths") or []
    metric = exp.get("searcher_metric")
    trials = [
        {
            **t,
            "latest_metric": metric_value(t.get("latest_validation"), metric),
            "rung": trial_rung(t, lengths),
        }
        for t in detail.get("trials") or []
    ]
    columns = list(TRIAL_COLUMNS)
    if any(t["rung"] for t in trials):
        columns.insert(2, ("RUNG", "rung"))
    if metric:
        cli.out.write(f"BEST and LATEST: {metric} (the searcher metric)\n")
    print_table(cli, trials, columns)
    return 0


def preview_search(cli: Cli, args: argparse.Namespace) -> int:
    """What the search will run, computed by the master from the config: nothing is created."""
    try:
        text = Path(args.config).read_text()
    except OSError as e:
        raise CliError(f"cannot read {args.config}: {e}") from None
    validate_config_text(text)
    result = cli.client().preview_search(text)
    if args.json:
        print_json(cli, result)
        return 0
    unit = result.get("unit", "batches")
    cli.out.write(
        f"Searcher {result['searcher']}: {result['trials']} trial(s), "
        f"{result['total_length']} {unit} of training in all (at most)\n"
    )
    if result.get("grid_size") is not None:
        cli.out.write(f"Grid: {result['grid_size']} point(s)\n")
    brackets = result.get("brackets") or [{"rungs": result.get("rungs") or []}]
    for i, bracket in enumerate(brackets, start=1):
        if len(brackets) > 1:
            cli.out.write(f"\nBracket {i} ({bracket.get('trials', '?')} trials)\n")
        else:
            cli.out.write("\n")
        rows = [
            {"rung": n, "length": r["length"], "trials": r["trials"]}
            for n, r in enumerate(bracket.get("rungs") or [], start=1)
        ]
        print_table(
            cli, rows, [("RUNG", "rung"), (f"LENGTH ({unit})", "length"), ("TRIALS", "trials")]
        )
    return 0


def _action(name: str, past: str) -> Callable[[Cli, argparse.Namespace], int]:
    def handler(cli: Cli, args: argparse.Namespace) -> int:
        exp = getattr(cli.client(), f"{name}_experiment")(args.id)
        cli.out.write(f"{past} experiment {args.id} (now {exp.get('state')})\n")
        return 0

    return handler


def logs(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    if args.head is not None or args.tail is not None:
        # Determined's `det e logs --head/--tail N`: the first trial's logs, as `det t logs`.
        from harness.cli import trial as trial_cli

        trials = client.list_experiment_trials(args.id)
        if not trials:
            raise CliError(f"experiment {args.id} has no trial yet")
        first = min(t["id"] for t in trials)
        return trial_cli.logs(
            cli,
            argparse.Namespace(id=first, follow=args.follow, head=args.head, tail=args.tail),
        )
    if args.follow:
        state = follow_experiment(client, args.id, show_progress=False, show_states=False)
        return 0 if state == "COMPLETED" else 1
    print_all_experiment_logs(client, args.id)
    return 0


def print_all_experiment_logs(client: Client, exp_id: int) -> None:
    trials = client.list_experiment_trials(exp_id)
    tail = LogTail(client, print_log_line)
    ids = [t["id"] for t in trials]
    while tail.poll(ids):
        pass


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", aliases=["e"], help="create and manage experiments")
    s = p.add_subparsers(dest="action", metavar="ACTION")
    # As Determined's: `det e` alone lists your experiments.
    p.set_defaults(func=list_experiments, all=False, state=None, csv=False, json=False)

    x = s.add_parser("create", help="validate CONFIG, upload MODEL_DIR, start the experiment")
    x.add_argument("config", metavar="CONFIG", help="experiment config (YAML)")
    x.add_argument(
        "model_dir", metavar="MODEL_DIR", nargs="?", help="directory with the training code"
    )
    x.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="another file or directory to pack beside the model directory (repeatable)",
    )
    x.add_argument(
        "-f",
        "--follow",
        "--follow-first-trial",
        dest="follow",
        action="store_true",
        help="follow states, progress and logs until the experiment ends",
    )
    x.add_argument("--paused", action="store_true", help="create it PAUSED (activate later)")
    x.add_argument("--template", metavar="NAME", help="merge the config over this template")
    x.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --config resources.slots_per_trial=2 (repeatable)",
    )
    x.add_argument(
        "-t",
        "--test",
        "--test-mode",
        dest="test",
        action="store_true",
        help="as Determined: run a small test experiment (one batch, a validation and a "
        "checkpoint) and report whether it succeeded; archived when it ends",
    )
    x.add_argument(
        "--validate-only",
        "--validate",
        dest="validate_only",
        action="store_true",
        help="validate the config locally and on the master without creating anything",
    )
    x.add_argument(
        "--project_id",
        "--project-id",
        dest="project_id",
        type=int,
        metavar="ID",
        help="Determined's project: detlab has one (Uncategorized, id 1)",
    )
    x.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    x.add_argument("-p", "--publish", action="append", default=[], help=argparse.SUPPRESS)
    x.add_argument(
        "--fail-if-cannot-fit",
        action="store_true",
        help="refuse the experiment when its slots_per_trial exceeds what its resource pool's "
        "agents offer now (default: create it with a warning; it waits for agents)",
    )
    x.set_defaults(func=create)

    x = s.add_parser("list", aliases=["ls"], help="list your experiments (--all: everyone's)")
    x.add_argument(
        "--all", "-a", action="store_true", help="experiments of every user, archived ones too"
    )
    x.add_argument("--state", help="only experiments in this state (e.g. ACTIVE)")
    fmt = x.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print as CSV (Determined's columns)")
    fmt.add_argument("--json", action="store_true", help="print machine-readable JSON")
    x.set_defaults(func=list_experiments)

    x = s.add_parser("describe", help="an experiment and its trials")
    x.add_argument("id", type=_ids, metavar="ID[,ID...]")
    add_json_flag(x)
    x.set_defaults(func=describe)

    for name, past, help_ in [
        ("pause", "Paused", "checkpoint the trials and free their slots"),
        ("activate", "Activated", "resume a paused experiment (also: unpause)"),
        ("cancel", "Canceled", "stop gracefully (trials checkpoint first)"),
        ("kill", "Killed", "stop now (processes are killed)"),
    ]:
        aliases = ["unpause"] if name == "activate" else []
        x = s.add_parser(name, aliases=aliases, help=help_)
        x.add_argument("id", type=int, metavar="ID")
        x.set_defaults(func=_action(name, past))

    x = s.add_parser(
        "preview-search", help="show the trials and lengths a config's search will run"
    )
    x.add_argument("config", metavar="CONFIG", help="experiment config (YAML)")
    add_json_flag(x)
    x.set_defaults(func=preview_search)

    from harness.cli.experiment_daily import register_daily
    from harness.cli.experiment_more import register_more

    set_fields = register_more(s)
    register_daily(s)

    x = s.add_parser("logs", help="logs of the experiment's trials")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    from harness.cli.trial import _count

    ends = x.add_mutually_exclusive_group()
    ends.add_argument("--head", type=_count, metavar="N", help="the first trial's first N lines")
    ends.add_argument("--tail", type=_count, metavar="N", help="the first trial's last N lines")
    x.set_defaults(func=logs)

    from harness.cli import experiment_gc

    experiment_gc.add_commands(s, set_fields)  # set gc-policy, gc-preview, delete
