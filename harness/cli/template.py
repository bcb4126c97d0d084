"""`det template list|describe|set|remove|render` (configuration templates)."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from harness.cli._common import Cli, CliError, add_json_flag, print_json, print_table, when


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from e


def list_templates(cli: Cli, args: argparse.Namespace) -> int:
    templates = cli.client().list_templates()
    if args.json:
        print_json(cli, templates)
        return 0
    print_table(
        cli,
        templates,
        [("NAME", "name"), ("UPDATED", lambda t: when(t.get("updated_at")))],
    )
    if args.details:  # Determined's -d: each template's config too
        client = cli.client()
        for t in templates:
            config = yaml.safe_dump(client.get_template(t["name"])["config"], sort_keys=False)
            indented = "".join(f"  {line}\n" for line in config.splitlines())
            cli.out.write(f"\n{t['name']}:\n{indented}")
    return 0


def describe(cli: Cli, args: argparse.Namespace) -> int:
    t = cli.client().get_template(args.name)
    if args.json:
        print_json(cli, t)
    else:
        cli.out.write(yaml.safe_dump(t["config"], sort_keys=False))
    return 0


def set_template(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().set_template(args.name, _read(args.file))
    cli.out.write(f"Set template {args.name}\n")
    return 0


def create_template(cli: Cli, args: argparse.Namespace) -> int:
    """Determined's `det template create`: refuses a name that exists (`set` replaces)."""
    from harness.api import NotFound

    client = cli.client()
    try:
        client.get_template(args.name)
    except NotFound:
        client.set_template(args.name, _read(args.file))
        cli.out.write(f"Created template {args.name}\n")
        return 0
    raise CliError(
        f"template {args.name!r} already exists; `det template set-value config` "
        "replaces its config"
    )


def update_config(cli: Cli, args: argparse.Namespace) -> int:
    """Determined's `det template set-value config`: only an existing template."""
    client = cli.client()
    client.get_template(args.name)  # NotFound names it
    client.set_template(args.name, _read(args.file))
    cli.out.write(f"Updated template {args.name}\n")
    return 0


def remove(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().remove_template(args.name)
    cli.out.write(f"Removed template {args.name}\n")
    return 0


def render(cli: Cli, args: argparse.Namespace) -> int:
    """The config merged over the template, each key annotated with where it came from."""
    body = cli.client().render_template(args.name, _read(args.config), Path(args.config).name)
    if args.json:
        print_json(cli, body)
        return 0
    cli.out.write(yaml.safe_dump(body["config"], sort_keys=False))
    cli.out.write("\n# where each key came from:\n")
    for path, source in sorted(body["sources"].items()):
        cli.out.write(f"#   {path}: {source}\n")
    for w in body.get("warnings") or []:
        cli.out.write(f"# warning: {w}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("template", aliases=["tpl"], help="configuration templates")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="list templates")
    x.add_argument("-d", "--details", action="store_true", help="show each template's config")
    add_json_flag(x)
    x.set_defaults(func=list_templates)
    x = s.add_parser("describe", help="show a template")
    x.add_argument("name", metavar="NAME")
    add_json_flag(x)
    x.set_defaults(func=describe)
    x = s.add_parser("set", help="create or replace template NAME from a YAML file")
    x.add_argument("name", metavar="NAME")
    x.add_argument("file", metavar="FILE")
    x.set_defaults(func=set_template)
    x = s.add_parser("create", help="create template NAME from a YAML file (a new name only)")
    x.add_argument("name", metavar="NAME")
    x.add_argument("file", metavar="FILE")
    x.set_defaults(func=create_template)

    x = s.add_parser("set-value", help="set a template's attributes: config NAME FILE")
    values = x.add_subparsers(dest="attribute", metavar="ATTRIBUTE", required=True)
    y = values.add_parser("config", help="replace an existing template's config")
    y.add_argument("name", metavar="NAME")
    y.add_argument("file", metavar="FILE")
    y.set_defaults(func=update_config)

    x = s.add_parser("remove", aliases=["rm"], help="delete a template")
    x.add_argument("name", metavar="NAME")
    x.set_defaults(func=remove)
    x = s.add_parser("render", help="show CONFIG merged over template NAME, key by key")
    x.add_argument("name", metavar="NAME")
    x.add_argument("config", metavar="CONFIG")
    add_json_flag(x)
    x.set_defaults(func=render)
