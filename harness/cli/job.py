"""`det job list` and `det job update`: the queue per resource pool, and steering it.

Every task that queues or runs is listed: an experiment (all its trials one job) and each command
(a job of its own, its task id the job id), as Determined's job list shows them."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, CliError, Column, add_json_flag, print_json, print_table, when

JOB_COLUMNS: list[Column] = [
    ("POS", "position"),
    ("AHEAD", "jobs_ahead"),
    ("JOB", "job_id"),
    ("TYPE", "type"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("USER", "user"),
    ("PRIORITY", "priority"),
    ("WEIGHT", "weight"),
    ("SLOTS", lambda j: f"{j.get('slots_held', 0)}/{j.get('slots_requested', 0)}"),
    ("SUBMITTED", lambda j: when(j.get("submitted_at"))),
    ("WAITING SINCE", lambda j: when(j.get("waiting_since"))),
    ("WAITING FOR", "reason"),
]


def list_jobs(cli: Cli, args: argparse.Namespace) -> int:
    pools = cli.client().job_queues(args.pool)
    if args.json:
        print_json(cli, pools)
        return 0
    for i, pool in enumerate(pools):
        if i:
            cli.out.write("\n")
        sched = pool.get("scheduler", {})
        cli.out.write(
            f"Pool {pool['name']} ({sched.get('type', 'priority')}): "
            f"{pool.get('slots_used', 0)}/{pool.get('slots_total', 0)} slots used, "
            f"{pool.get('agents', 0)} agent(s), {len(pool.get('jobs') or [])} job(s)\n"
        )
        if pool.get("note"):  # a backend's word on the pool (Slurm: its nodes are drained)
            cli.out.write(f"Note: {pool['note']}\n")
        if pool.get("jobs"):
            print_table(cli, pool["jobs"], JOB_COLUMNS)
    return 0


def update_job(cli: Cli, args: argparse.Namespace) -> int:
    changes = {
        "priority": args.priority,
        "weight": args.weight,
        "resource_pool": args.resource_pool,
        "ahead_of": args.ahead_of,
        "behind_of": args.behind_of,
    }
    if all(v is None for v in changes.values()):
        raise CliError(
            "nothing to change: give --priority, --weight, --resource-pool, --ahead-of or "
            "--behind-of"
        )
    job = cli.client().update_job(args.job_id, **changes)
    if args.json:
        print_json(cli, job)
        return 0
    pos = job.get("position")
    where = f", position {pos} in pool {job.get('resource_pool')}" if pos else ""
    cli.out.write(
        f"Updated job {args.job_id}: priority {job.get('priority')}, weight "
        f"{job.get('weight')}{where}\n"
    )
    for note in job.get("notes") or []:
        cli.out.write(f"Note: {note}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("job", aliases=["j"], help="the job queue of each resource pool")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="queued and scheduled jobs, in queue order")
    x.add_argument("--pool", help="only this resource pool")
    add_json_flag(x)
    x.set_defaults(func=list_jobs)
    x = s.add_parser("update", help="change a job's priority, weight, pool or queue position")
    x.add_argument("job_id", metavar="JOB", help="job id (the experiment id)")
    x.add_argument("--priority", type=int, help="1 (first) to 99")
    x.add_argument("--weight", type=float, help="share under the fair_share scheduler")
    x.add_argument("--resource-pool", help="move to this pool (running trials are requeued)")
    g = x.add_mutually_exclusive_group()
    g.add_argument("--ahead-of", metavar="JOB", help="queue ahead of this job")
    g.add_argument("--behind-of", metavar="JOB", help="queue behind this job")
    add_json_flag(x)
    x.set_defaults(func=update_job)
