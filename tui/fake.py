"""A fixed-data stand-in for `harness.api.client.Client` (snapshot tests, demos, benchmarks).

`FakeClient()` holds a small, deterministic cluster; `FakeClient.big(jobs, agents)` a large one.
`NOW` is the clock the snapshot tests pin the UI to, so ages and wait times never change.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from harness.api import Conflict, NotFound
from tui.fake_tasks import FakeTasks, make_tasks

JSON = dict[str, Any]
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC).timestamp()


def iso(seconds_ago: float) -> str:
    t = datetime.fromtimestamp(NOW - seconds_ago, tz=UTC)
    return t.isoformat().replace("+00:00", "Z")


def make_agents(n_agents: int, gpus: int = 4, busy_trials: list[int] | None = None) -> list[JSON]:
    agents = []
    trials = list(busy_trials or [])
    for a in range(n_agents):
        slots = []
        for i in range(gpus):
            trial = trials.pop(0) if trials else None
            util = None if trial is None else float((a * 37 + i * 23) % 100)
            if trial is not None and (a + i) % 5 == 4:
                util = 1.0  # allocated but idle
            slots.append(
                {
                    "index": i,
                    "type": "gpu",
                    "uuid": f"GPU-{a:03d}-{i}",
                    "name": "NVIDIA A100-SXM4-40GB",
                    "memory_mb": 40960,
                    "enabled": True,
                    "allocation_id": f"alloc-{trial}" if trial else None,
                    "trial_id": trial,
                    "stats": {
                        "util_percent": util if util is not None else 0.0,
                        "memory_used_mb": 0 if trial is None else 1024 * (4 + (a + i * 7) % 30),
                        "temperature_c": 34.0 + (0 if trial is None else (a * 7 + i * 11) % 45),
                        "power_w": 55.0 + (0 if trial is None else (a * 13 + i * 17) % 300),
                    },
                }
            )
        agents.append(
            {
                "id": f"gpu-node-{a:02d}",
                "state": "ACTIVE",
                "resource_pool": "default" if a % 4 else "a100",
                "hostname": f"gpu-node-{a:02d}.lab",
                "runtime": "docker",
                "version": "0.1.0",
                "last_seen": iso(1),
                "slots": slots,
            }
        )
    return agents


def make_models() -> tuple[list[JSON], dict[str, list[JSON]]]:
    """Two registered models; `digits` has two versions and a moved `production` alias."""

    def version(n: int, uuid: str, exp: int, trial: int, steps: int, acc: float) -> JSON:
        return {
            "version": n,
            "comment": f"v{n}",
            "aliases": ["production"] if n == 2 else [],
            "creation_time": iso(3600 * (3 - n)),
            "checkpoint": {
                "uuid": uuid,
                "experiment_id": exp,
                "trial_id": trial,
                "steps_completed": steps,
                "state": "ACTIVE",
                "lineage": {"validation_metrics": {"validation_accuracy": acc}},
            },
        }

    models = [
        {
            "id": 1,
            "name": "digits",
            "num_versions": 2,
            "aliases": {"production": 2},
            "labels": ["cv"],
            "username": "alice",
            "archived": False,
            "last_updated_time": iso(600),
        },
        {
            "id": 2,
            "name": "bert-qa",
            "num_versions": 0,
            "aliases": {},
            "labels": [],
            "username": "bob",
            "archived": True,
            "last_updated_time": iso(7200),
        },
    ]
    versions = {
        "digits": [
            version(1, "0b9c7e9e-0000-4000-8000-000000000001", 5, 501, 400, 0.93),
            version(2, "0b9c7e9e-0000-4000-8000-000000000002", 5, 501, 800, 0.97),
        ],
        "bert-qa": [],
    }
    return models, versions


class FakeClient(FakeTasks):
    """Same method names and return shapes as `Client` for the routes the TUI uses (the task
    routes in tui/fake_tasks.py)."""

    master = "http://master.lab:8080"

    def __init__(self, *, queue: bool = True, series: bool = True) -> None:
        self.has_queue = queue
        self.has_series = series
        self.user = {"id": 1, "username": "alice", "admin": False, "active": True}
        self.calls: list[tuple[str, tuple, dict]] = []
        self.tasks = make_tasks(iso)
        self.agents = make_agents(2, gpus=4, busy_trials=[101, 102, 103, 201, 202])
        self.agents.append(
            {
                "id": "cpu-box",
                "state": "LOST",
                "resource_pool": "cpu",
                "hostname": "cpu-box.lab",
                "runtime": "process",
                "version": "0.1.0",
                "last_seen": iso(95),
                "slots": [
                    {
                        "index": 0,
                        "type": "cpu",
                        "uuid": None,
                        "name": "cpu",
                        "memory_mb": 65536,
                        "enabled": True,
                        "allocation_id": None,
                        "trial_id": None,
                        "stats": {"util_percent": 12.0, "memory_used_mb": 9000},
                    }
                ],
            }
        )
        self.experiments: list[JSON] = []
        self.models, self.model_versions = make_models()
        self.trials: dict[int, JSON] = {}
        specs = [
            (1, "resnet50-baseline", "alice", "ACTIVE", 0.62, 3, "default", 42),
            (2, "bert-finetune-asha", "bob", "ACTIVE", 0.18, 16, "default", 30),
            (3, "gpt-small-sweep", "alice", "ACTIVE", 0.0, 4, "default", 42),
            (4, "vit-tiny-lr", "carol", "PAUSED", 0.4, 2, "a100", 50),
            (5, "mnist-smoke", "alice", "COMPLETED", 1.0, 1, "default", 42),
            (6, "diffusion-xl", "bob", "ERROR", 0.05, 1, "a100", 42),
        ]
        for eid, name, owner, state, progress, ntrials, pool, prio in specs:
            self.experiments.append(
                {
                    "id": eid,
                    "name": name,
                    "description": "",
                    "state": state,
                    "owner": owner,
                    "config": {"resources": {"priority": prio, "slots_per_trial": 1}},
                    "progress": progress,
                    "num_trials": ntrials,
                    "best_trial_id": eid * 100 + 1 if progress > 0 else None,
                    "best_validation": round(0.9 / (eid + 1), 4) if progress > 0 else None,
                    "searcher_metric": "validation_loss",
                    "smaller_is_better": True,
                    "resource_pool": pool,
                    "created_at": iso(3600 * eid + 120),
                    "ended_at": iso(60) if state in ("COMPLETED", "ERROR") else None,
                }
            )
            for k in range(min(ntrials, 6)):
                tid = eid * 100 + k + 1
                running = state == "ACTIVE" and tid in (101, 102, 103, 201, 202)
                steps = int(progress * 1000 * (1 - k * 0.1))
                self.trials[tid] = {
                    "id": tid,
                    "experiment_id": eid,
                    "request_id": f"r{tid}",
                    "state": state,
                    "display_state": ("RUNNING" if running else "QUEUED")
                    if state == "ACTIVE"
                    else state,
                    "hparams": {"lr": round(0.1 / (k + 1), 4), "batch_size": 32 * (k + 1)},
                    "seed": 1000 + tid,
                    "restarts": 1 if tid == 102 else 0,
                    "steps_completed": steps,
                    "searcher_target": {202: 333, 203: 111}.get(tid, 1000),  # ASHA rungs
                    "progress": steps / 1000,
                    "best_validation": round(0.9 / (k + 2), 4) if steps else None,
                    "latest_validation": {
                        "steps_completed": steps,
                        "validation_loss": round(1.0 / (k + 2), 4),
                        "accuracy": round(1 - 1.0 / (k + 3), 4),
                        "top5_accuracy": round(1 - 0.5 / (k + 3), 4),
                    }
                    if steps
                    else None,
                    "latest_checkpoint": f"ckpt-{tid}-{steps}" if steps else None,
                    "exit_reason": "ERRORED" if state == "ERROR" else None,
                    "allocation_id": f"alloc-{tid}" if running else None,
                    "agent_id": "gpu-node-00" if running else None,
                    "created_at": iso(3600 * eid),
                    "ended_at": None,
                    # an ASHA trial that finished its rung and waits for promotion
                    "waiting_for": "promotion" if tid == 203 else None,
                }
        self.rung_lengths: dict[int, list[int]] = {2: [111, 333, 1000]}  # experiment 2: ASHA
        self.pools = self._build_pools()

    # ---- a big cluster for benchmarks -----------------------------------------------------
    @classmethod
    def big(cls, jobs: int = 10_000, agents: int = 100) -> FakeClient:
        fake = cls()
        fake.agents = make_agents(agents, gpus=8, busy_trials=list(range(1, agents * 8 // 2)))
        fake.pools = [
            {
                "name": "default",
                "description": "",
                "scheduler": {"type": "priority", "preemption": True, "fitting_policy": "best"},
                "slots_total": agents * 8,
                "slots_used": agents * 4,
                "agents": agents,
                "jobs": [big_job(i) for i in range(jobs)],
            }
        ]
        return fake

    # ---- the job queue ----------------------------------------------------------------------
    def _build_pools(self) -> list[JSON]:
        pools: dict[str, list[JSON]] = {"default": [], "a100": [], "cpu": []}
        for e in self.experiments:
            if e["state"] not in ("ACTIVE", "PAUSED"):
                continue
            trials = [t for t in self.trials.values() if t["experiment_id"] == e["id"]]
            running = sum(t["display_state"] == "RUNNING" for t in trials)
            queued = sum(t["display_state"] == "QUEUED" and not t["waiting_for"] for t in trials)
            pools[e["resource_pool"]].append(
                {
                    "job_id": str(e["id"]),
                    "type": "EXPERIMENT",
                    "experiment_id": e["id"],
                    "experiment_state": e["state"],
                    "name": e["name"],
                    "user": e["owner"],
                    "state": "SCHEDULED" if running else "QUEUED",
                    "position": 0,
                    "jobs_ahead": 0,
                    "priority": e["config"]["resources"]["priority"],
                    "weight": 1.0,
                    "resource_pool": e["resource_pool"],
                    "slots_requested": running + queued,
                    "slots_held": running,
                    "trials_queued": queued,
                    "trials_running": running,
                    "submitted_at": e["created_at"],
                    "reason": None if running else "waiting for 1 free slot(s)",
                }
            )
        out = []
        for name, jobs in pools.items():
            jobs.sort(key=lambda j: (j["priority"], j["submitted_at"]))
            self._renumber(jobs)
            out.append(
                {
                    "name": name,
                    "description": "",
                    "scheduler": {"type": "priority", "preemption": True, "fitting_policy": "best"},
                    "slots_total": 0 if name == "cpu" else 8 if name == "default" else 4,
                    "slots_used": sum(j["slots_held"] for j in jobs),
                    "agents": 0 if name == "cpu" else 1,
                    "jobs": jobs,
                }
            )
        return out

    @staticmethod
    def _renumber(jobs: list[JSON]) -> None:
        for i, j in enumerate(jobs):
            j["position"] = i + 1
            j["jobs_ahead"] = i

    def _rec(self, name: str, *args: Any, **kw: Any) -> None:
        self.calls.append((name, args, kw))

    def job_queues(self, pool: str | None = None) -> list[JSON]:
        self._rec("job_queues", pool)
        if not self.has_queue:
            raise NotFound(404, "not found", "not_found")
        return copy.deepcopy([p for p in self.pools if pool in (None, p["name"])])

    def update_job(self, job_id: str | int, **changes: Any) -> JSON:
        self._rec("update_job", job_id, **changes)
        job_id = str(job_id)
        for pool in self.pools:
            jobs = pool["jobs"]
            for i, job in enumerate(jobs):
                if job["job_id"] != job_id:
                    continue
                if job["user"] != self.user["username"] and not self.user["admin"]:
                    from harness.api import Forbidden

                    raise Forbidden(403, f"job {job_id} belongs to {job['user']}", "forbidden")
                if "priority" in changes:
                    job["priority"] = int(changes["priority"])
                if "weight" in changes:
                    job["weight"] = float(changes["weight"])
                target = changes.get("ahead_of") or changes.get("behind_of")
                if target is not None:
                    jobs.pop(i)
                    t = next(k for k, j in enumerate(jobs) if j["job_id"] == str(target))
                    jobs.insert(t if changes.get("ahead_of") else t + 1, job)
                if "resource_pool" in changes:
                    jobs.pop(i)
                    job["resource_pool"] = changes["resource_pool"]
                    next(p for p in self.pools if p["name"] == changes["resource_pool"])[
                        "jobs"
                    ].append(job)
                for p in self.pools:
                    self._renumber(p["jobs"])
                return copy.deepcopy(job)
        raise NotFound(404, f"job {job_id} not found", "not_found")

    # ---- model registry ------------------------------------------------------------------------
    def list_models(self, archived: bool | None = None) -> list[JSON]:
        self._rec("list_models")
        return copy.deepcopy(self.models)

    def list_model_versions(self, name: str) -> list[JSON]:
        self._rec("list_model_versions", name)
        if name not in self.model_versions:
            raise NotFound(404, f"model {name!r} not found", "not_found")
        return copy.deepcopy(self.model_versions[name])

    # ---- everything else --------------------------------------------------------------------
    def me(self) -> JSON:
        return dict(self.user)

    def list_agents(self) -> list[JSON]:
        self._rec("list_agents")
        return copy.deepcopy(self.agents)

    def list_experiments(
        self, state: str | None = None, user: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[JSON], int]:
        exps = [e for e in reversed(self.experiments) if state in (None, e["state"])]
        return copy.deepcopy(exps[offset : offset + limit]), len(exps)

    def describe_experiment(self, exp_id: int, trials: bool = True) -> JSON:
        eid = int(exp_id)
        for e in self.experiments:
            if e["id"] == eid:
                body: JSON = {"experiment": e, "rung_lengths": self.rung_lengths.get(e["id"], [])}
                if trials:
                    body["trials"] = [t for t in self.trials.values() if t["experiment_id"] == eid]
                return copy.deepcopy(body)
        raise NotFound(404, f"experiment {exp_id} not found", "not_found")

    def get_experiment(self, exp_id: int) -> JSON:
        return self.describe_experiment(exp_id)["experiment"]

    def get_trial(self, trial_id: int) -> JSON:
        if int(trial_id) not in self.trials:
            raise NotFound(404, f"trial {trial_id} not found", "not_found")
        return copy.deepcopy(self.trials[int(trial_id)])

    def trial_logs(
        self,
        trial_id: int,
        after: int = 0,
        limit: int = 1000,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> JSON:
        lines = [
            "starting trial 101 (lr=0.1, batch_size=32)",
            "loading dataset: 50000 train / 10000 validation images",
            *[f"step {s:5d}  loss {1 / (1 + s / 100):.4f}  lr 0.1000" for s in range(0, 600, 50)],
            "Traceback (most recent call last):",
            '  File "train.py", line 42, in <module>',
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "restarting from checkpoint ckpt-101-600 (restart 1 of 5)",
            *[f"step {s:5d}  loss {1 / (1 + s / 100):.4f}  lr 0.0500" for s in range(600, 650, 10)],
        ]
        logs: list[JSON] = [
            {
                "seq": i + 1,
                "timestamp": iso(600 - i * 10),
                "stream": "master" if line.startswith("restarting") else "stdout",
                "agent_id": "gpu-node-00",
                "allocation_id": "alloc-101",
                "line": line,
            }
            for i, line in enumerate(lines)
        ]
        page = [entry for entry in logs if entry["seq"] > after][:limit]
        return {"logs": page, "last_seq": page[-1]["seq"] if page else after, "done": False}

    def list_trial_checkpoints(self, trial_id: int) -> list[JSON]:
        t = self.get_trial(trial_id)
        return [
            {
                "uuid": f"ckpt-{trial_id}-{s}",
                "trial_id": trial_id,
                "experiment_id": t["experiment_id"],
                "steps_completed": s,
                "size": 123_456_789 * (i + 1),
                "state": "COMPLETED",
                "reported_at": iso(1800 - s),
                "resources": {},
                "metadata": {},
            }
            for i, s in enumerate(range(200, t["steps_completed"] + 1, 200))
        ]

    def metric_names(self, trial_id: int) -> JSON:
        if not self.has_series:
            raise NotFound(404, "not found", "not_found")
        self.get_trial(trial_id)
        return {"training": ["loss", "lr", "accuracy"], "validation": ["loss", "accuracy"]}

    def metric_series(
        self, trial_id: int, group: str, names: list[str] | tuple[str, ...], max_points: int = 500
    ) -> JSON:
        if not self.has_series:
            raise NotFound(404, "not found", "not_found")
        t = self.get_trial(trial_id)
        last = max(t["steps_completed"], 10)
        every = 10 if group == "training" else 100
        steps = list(range(every, last + 1, every))
        series = {}
        for name in names:
            if name == "loss":
                off = 0.05 if group == "validation" else 0.0
                vals = [1 / (1 + s / 80) + off + 0.02 * math.sin(s / 7) for s in steps]
            elif name == "accuracy":
                vals = [1 - 1 / (1 + s / 120) for s in steps]
            else:
                vals = [0.1 if s < 600 else 0.05 for s in steps]
            series[name] = {"steps": steps, "values": vals}
        return {"series": series, "downsampled": False}

    def trial_metrics(self, trial_id: int, **kw: Any) -> list[JSON]:
        return []

    def _exp(self, exp_id: int, allowed: tuple[str, ...], new: str, verb: str) -> JSON:
        self._rec(verb, exp_id)
        e = next((e for e in self.experiments if e["id"] == int(exp_id)), None)
        if e is None:
            raise NotFound(404, f"experiment {exp_id} not found", "not_found")
        if e["state"] not in allowed:
            raise Conflict(
                409, f"experiment {exp_id} is {e['state']}; cannot {verb} it", "conflict"
            )
        e["state"] = new
        self.pools = self._build_pools()
        return copy.deepcopy(e)

    def pause_experiment(self, exp_id: int) -> JSON:
        return self._exp(exp_id, ("ACTIVE",), "PAUSED", "pause")

    def activate_experiment(self, exp_id: int) -> JSON:
        return self._exp(exp_id, ("PAUSED",), "ACTIVE", "activate")

    def kill_experiment(self, exp_id: int) -> JSON:
        return self._exp(exp_id, ("ACTIVE", "PAUSED"), "CANCELED", "kill")


def big_job(i: int) -> JSON:
    return {
        "job_id": str(i + 1),
        "type": "EXPERIMENT",
        "experiment_id": i + 1,
        "name": f"sweep-{i % 97}-{i}",
        "user": ("alice", "bob", "carol", "dave")[i % 4],
        "state": "SCHEDULED" if i < 400 else "QUEUED",
        "position": i + 1,
        "jobs_ahead": i,
        "priority": 20 + i % 50,
        "weight": 1.0,
        "resource_pool": "default",
        "slots_requested": 1 + i % 8,
        "slots_held": 1 if i < 400 else 0,
        "trials_queued": 0 if i < 400 else 1 + i % 8,
        "trials_running": 1 if i < 400 else 0,
        "submitted_at": (
            datetime.fromtimestamp(NOW, tz=UTC) - timedelta(seconds=i * 3)
        ).isoformat(),
        "reason": None if i < 400 else f"waiting for {1 + i % 8} free slot(s)",
    }
