"""det-tui's cluster view shows provider pools and their last launch error."""

from __future__ import annotations

from textual.widgets import Static

from tests.tui.helpers import fake_app, settle, sync, wait_until
from tui.fake import FakeClient, iso

POOLS = [
    {
        "name": "gcp-gpu",
        "provider": "gcp",
        "instance_type": "n1-standard-16",
        "instance_slots": 2,
        "min_instances": 0,
        "max_instances": 4,
        "instances": [
            {"cloud_id": "det-agent-a", "state": "RUNNING"},
            {"cloud_id": "det-agent-b", "state": "STARTING"},
        ],
        "pending_launches": 1,
        "recent": [],
        "last_error": "launch failed: Forbidden: QUOTA_EXCEEDED",
        "last_error_at": iso(90),
        "backoff_until": iso(-30),
    }
]


class ElasticClient(FakeClient):
    def provisioner_pools(self) -> list[dict]:
        self._rec("provisioner_pools")
        return POOLS


@sync
async def test_cluster_view_shows_elastic_pools_and_launch_errors() -> None:
    app = fake_app(("cluster", None), api=ElasticClient())
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        elastic = app.screen.query_one("#elastic", Static)
        await wait_until(pilot, lambda: elastic.display, what="elastic line shown")
        text = str(elastic.render())
        assert "gcp-gpu" in text and "1 running, 1 starting, max 4" in text
        assert "QUOTA_EXCEEDED" in text and "launch error 1m" in text


@sync
async def test_cluster_view_without_provider_pools_hides_the_line() -> None:
    app = fake_app(("cluster", None), api=FakeClient())
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        assert app.screen.query_one("#elastic", Static).display is False
