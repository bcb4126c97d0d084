"""`det model create|list|describe|register-version|alias|download|delete|archive|unarchive`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.cli._common import (
    Cli,
    CliError,
    add_json_flag,
    print_fields,
    print_json,
    print_table,
    when,
)


def _json_arg(raw: str | None, what: str) -> dict | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise CliError(f"{what} must be a JSON object: {e}") from e
    if not isinstance(value, dict):
        raise CliError(f"{what} must be a JSON object")
    return value


def create(cli: Cli, args: argparse.Namespace) -> int:
    m = cli.client().create_model(
        args.name,
        description=args.description,
        labels=args.label or None,
        metadata=_json_arg(args.metadata, "--metadata"),
        notes=args.notes,
    )
    if args.json:
        print_json(cli, m)
        return 0
    cli.out.write(f"Created model {m['name']} (id {m['id']})\n")
    return 0


def list_models(cli: Cli, args: argparse.Namespace) -> int:
    models = cli.client().list_models(None if args.all else False)
    if args.json:
        print_json(cli, models)
        return 0
    print_table(
        cli,
        models,
        [
            ("ID", "id"),
            ("NAME", "name"),
            ("VERSIONS", "num_versions"),
            ("ALIASES", lambda m: ", ".join(f"{a}={v}" for a, v in m["aliases"].items())),
            ("LABELS", lambda m: ", ".join(m["labels"])),
            ("ARCHIVED", "archived"),
            ("OWNER", "username"),
            ("UPDATED", lambda m: when(m.get("last_updated_time"))),
        ],
    )
    return 0


def describe(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    m = client.get_model(args.name)
    versions = client.list_model_versions(args.name)
    aliases = client.model_aliases(args.name)
    if args.json:
        print_json(cli, {"model": m, "model_versions": versions, **aliases})
        return 0
    shown = {**m, "labels": ", ".join(m["labels"]), "metadata": json.dumps(m["metadata"])}
    print_fields(
        cli,
        shown,
        [
            ("ID", "id"),
            ("Name", "name"),
            ("Description", "description"),
            ("Labels", "labels"),
            ("Metadata", "metadata"),
            ("Notes", "notes"),
            ("Archived", "archived"),
            ("Owner", "username"),
        ],
    )
    cli.out.write("\n")
    _versions_table(cli, versions)
    if aliases["history"]:
        cli.out.write("\nAlias history:\n")
        print_table(
            cli,
            aliases["history"],
            [
                ("ALIAS", "alias"),
                ("FROM", "from_version"),
                ("TO", "to_version"),
                ("BY", "username"),
                ("AT", lambda e: when(e.get("at"))),
            ],
        )
    return 0


def _versions_table(cli: Cli, versions: list[dict]) -> None:
    print_table(
        cli,
        versions,
        [
            ("VERSION", "version"),
            ("ALIASES", lambda v: ", ".join(v["aliases"])),
            ("CHECKPOINT", lambda v: v["checkpoint"].get("uuid")),
            ("EXPERIMENT", lambda v: v["checkpoint"].get("experiment_id")),
            ("TRIAL", lambda v: v["checkpoint"].get("trial_id")),
            ("STEPS", lambda v: v["checkpoint"].get("steps_completed")),
            (
                "VALIDATION",
                lambda v: (v["checkpoint"].get("lineage") or {}).get("validation_metrics"),
            ),
            ("COMMENT", "comment"),
            ("CREATED", lambda v: when(v.get("creation_time"))),
        ],
    )


def list_versions(cli: Cli, args: argparse.Namespace) -> int:
    """`det model list-versions NAME`: newest first, as Determined lists them."""
    client = cli.client()
    m = client.get_model(args.name)
    versions = sorted(client.list_model_versions(args.name), key=lambda v: -int(v["version"]))
    if args.json:  # Determined's keys (its GET /models/{id}/versions reply)
        print_json(cli, {"model": m, "modelVersions": versions})
        return 0
    cli.out.write(f"Model {m['name']} ({m.get('description') or 'no description'})\n\n")
    _versions_table(cli, versions)
    return 0


def register_version(cli: Cli, args: argparse.Namespace) -> int:
    v = cli.client().register_model_version(
        args.name,
        args.uuid,
        comment=args.comment,
        metadata=_json_arg(args.metadata, "--metadata"),
        labels=args.label or None,
    )
    if args.json:
        print_json(cli, v)
        return 0
    cli.out.write(f"Registered checkpoint {args.uuid} as {args.name} version {v['version']}\n")
    return 0


def move(cli: Cli, args: argparse.Namespace) -> int:
    """Determined's `det model move NAME WORKSPACE`: detlab has one workspace."""
    from harness._sdk_registry import DEFAULT_WORKSPACE

    cli.client().get_model(args.name)
    if args.workspace_name != DEFAULT_WORKSPACE:
        raise CliError(
            f"detlab has one workspace, {DEFAULT_WORKSPACE!r}; there is no "
            f"{args.workspace_name!r} to move model {args.name!r} to"
        )
    cli.out.write(f"Model {args.name} is in {DEFAULT_WORKSPACE} (nothing to move)\n")
    return 0


def alias_set(cli: Cli, args: argparse.Namespace) -> int:
    out = cli.client().set_model_alias(args.name, args.alias, args.version)
    before = out.get("previous_version")
    moved = f" (was version {before})" if before is not None else ""
    cli.out.write(f"{args.name}@{args.alias} -> version {out['version']}{moved}\n")
    return 0


def alias_remove(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().remove_model_alias(args.name, args.alias)
    cli.out.write(f"Removed alias {args.alias} of {args.name}\n")
    return 0


def parse_ref(ref: str) -> tuple[str, str | int]:
    """`NAME`, `NAME:VERSION` or `NAME@ALIAS` -> (name, version number | alias | -1)."""
    if "@" in ref:
        name, alias = ref.rsplit("@", 1)
        return name, alias
    if ":" in ref:
        name, num = ref.rsplit(":", 1)
        if not num.isdigit():
            raise CliError(f"{ref!r}: the version after ':' must be a number")
        return name, int(num)
    return ref, -1


def download(cli: Cli, args: argparse.Namespace) -> int:
    from harness.storage.fetch import download as fetch

    name, ref = parse_ref(args.ref)
    client = cli.client()
    if ref == -1:
        versions = client.list_model_versions(name)
        if not versions:
            raise CliError(f"model {name!r} has no versions")
        v = versions[-1]
    else:
        v = client.get_model_version(name, ref)
    uuid = v["checkpoint"]["uuid"]
    dest = Path(args.output or Path("checkpoints") / f"{name}-v{v['version']}")
    dest, how = fetch(client, uuid, dest, via_master=args.via_master)
    cli.out.write(
        f"Downloaded {name} version {v['version']} (checkpoint {uuid}) to {dest} ({how})\n"
    )
    return 0


def delete(cli: Cli, args: argparse.Namespace) -> int:
    from harness.cli.checkpoint import confirm

    if not args.yes and not confirm(cli, f"Delete model {args.name} and all its versions?"):
        cli.out.write("Nothing deleted.\n")
        return 1
    out = cli.client().delete_model(args.name)
    cli.out.write(f"Deleted model {args.name}\n")
    if out.get("unreferenced_checkpoints"):
        cli.out.write(
            "These checkpoints belonged to deleted experiments and are no longer registered; "
            f"their files remain in storage: {', '.join(out['unreferenced_checkpoints'])}\n"
        )
    return 0


def archive(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().archive_model(args.name, args.archived)
    cli.out.write(f"{'Archived' if args.archived else 'Unarchived'} model {args.name}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", aliases=["m"], help="the model registry")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    x = s.add_parser("create", help="create a model")
    x.add_argument("name", metavar="NAME")
    x.add_argument("--description", "-d")
    x.add_argument("--label", action="append", help="repeatable")
    x.add_argument("--metadata", help="a JSON object")
    x.add_argument("--notes")
    add_json_flag(x)
    x.set_defaults(func=create)

    x = s.add_parser("list", aliases=["ls"], help="models (--all: archived too)")
    x.add_argument("--all", "-a", action="store_true")
    add_json_flag(x)
    x.set_defaults(func=list_models)

    x = s.add_parser("describe", help="a model, its versions, aliases and alias history")
    x.add_argument("name", metavar="NAME")
    add_json_flag(x)
    x.set_defaults(func=describe)

    x = s.add_parser("list-versions", help="a model's versions, newest first")
    x.add_argument("name", metavar="NAME")
    add_json_flag(x)
    x.set_defaults(func=list_versions)

    x = s.add_parser("register-version", help="register checkpoint UUID as the next version")
    x.add_argument("name", metavar="NAME")
    x.add_argument("uuid", metavar="UUID")
    x.add_argument("--comment", "-c")
    x.add_argument("--metadata", help="a JSON object")
    x.add_argument("--label", action="append")
    add_json_flag(x)
    x.set_defaults(func=register_version)

    x = s.add_parser("move", help="move to a workspace (detlab has only the default)")
    x.add_argument("name", metavar="NAME")
    x.add_argument("workspace_name", metavar="WORKSPACE")
    x.set_defaults(func=move)

    x = s.add_parser("alias", help="point an alias at a version (or remove it)")
    ss = x.add_subparsers(dest="alias_action", metavar="ACTION", required=True)
    y = ss.add_parser("set", help="NAME ALIAS VERSION")
    y.add_argument("name", metavar="NAME")
    y.add_argument("alias", metavar="ALIAS")
    y.add_argument("version", type=int, metavar="VERSION")
    y.set_defaults(func=alias_set)
    y = ss.add_parser("remove", help="NAME ALIAS")
    y.add_argument("name", metavar="NAME")
    y.add_argument("alias", metavar="ALIAS")
    y.set_defaults(func=alias_remove)

    x = s.add_parser("download", help="NAME[@ALIAS|:VERSION] (default: the newest version)")
    x.add_argument("ref", metavar="NAME[@ALIAS|:VERSION]")
    x.add_argument("-o", "--output", metavar="DIR")
    x.add_argument("--via-master", action="store_true", help="always go through the master")
    x.set_defaults(func=download)

    x = s.add_parser("delete", help="delete a model and its versions (not the checkpoints)")
    x.add_argument("name", metavar="NAME")
    x.add_argument("--yes", "-y", action="store_true")
    x.set_defaults(func=delete)

    for name, archived in (("archive", True), ("unarchive", False)):
        x = s.add_parser(name, help=f"{name} a model")
        x.add_argument("name", metavar="NAME")
        x.set_defaults(func=archive, archived=archived)
