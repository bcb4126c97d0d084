"""The part of the REST client det-tui uses, declared once.

`harness.api.Client` implements it against a master; `tui.fake.FakeClient` implements it with fixed
data for tests, snapshots and `det-tui --demo`. The app and its screens are typed against this
Protocol, so neither side can drift from the other unnoticed
(tests/tui/test_views.py::test_fake_client_implements_the_api checks both).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

JSON = dict[str, Any]


@runtime_checkable
class ClusterAPI(Protocol):
    def me(self) -> JSON: ...

    def list_agents(self) -> list[JSON]: ...

    def job_queues(self, pool: str | None = None) -> list[JSON]: ...

    def update_job(self, job_id: str | int, **changes: Any) -> JSON: ...

    def list_experiments(
        self,
        state: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[JSON], int]: ...

    def describe_experiment(self, exp_id: int, trials: bool = True) -> JSON: ...

    def get_experiment(self, exp_id: int) -> JSON: ...

    def get_trial(self, trial_id: int) -> JSON: ...

    def trial_logs(
        self,
        trial_id: int,
        after: int = 0,
        limit: int = 1000,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> JSON: ...

    def list_trial_checkpoints(self, trial_id: int) -> list[JSON]: ...

    def metric_names(self, trial_id: int) -> JSON: ...

    def metric_series(
        self,
        trial_id: int,
        group: str,
        names: list[str] | tuple[str, ...],
        max_points: int = 500,
    ) -> JSON: ...

    def list_tasks(self, task_type: str | None = None, active: bool = False) -> list[JSON]: ...

    def kill_command(self, task_id: str) -> JSON: ...

    def kill_notebook(self, task_id: str) -> JSON: ...

    def kill_shell(self, task_id: str) -> JSON: ...

    def kill_tensorboard(self, task_id: str) -> JSON: ...

    def task_logs(
        self,
        task_id: str,
        after: int = 0,
        limit: int = 1000,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> JSON: ...

    def list_models(self, archived: bool | None = None) -> list[JSON]: ...

    def list_model_versions(self, name: str) -> list[JSON]: ...

    def pause_experiment(self, exp_id: int) -> JSON: ...

    def activate_experiment(self, exp_id: int) -> JSON: ...

    def kill_experiment(self, exp_id: int) -> JSON: ...
