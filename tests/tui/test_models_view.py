"""The `:models` view on fixed data: models, the highlighted model's versions, aliases."""

from __future__ import annotations

from tui.fake import FakeClient
from tui.screens.models import ModelsScreen
from tui.widgets.table import ResourceTable

from .helpers import fake_app, settle, sync, wait_until

SIZE = (160, 40)


@sync
async def test_models_view_lists_models_and_versions_of_the_highlighted_one() -> None:
    api = FakeClient()
    app = fake_app(("models", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ModelsScreen)
        models = app.screen.query_one("#models", ResourceTable)
        versions = app.screen.query_one("#model-versions", ResourceTable)
        assert [r.key for r in models.view] == ["digits", "bert-qa"]
        assert models.view[0].cells[2] == "production=2"
        await wait_until(pilot, lambda: [r.key for r in versions.view] == ["1", "2"], what="v")
        v2 = versions.view[1]
        assert v2.cells[1] == "production" and v2.cells[2].endswith("000000000002")
        assert '"validation_accuracy":0.97' in v2.cells[6]
        await pilot.press("j")  # the archived model with no versions
        await wait_until(pilot, lambda: ("list_model_versions", ("bert-qa",), {}) in api.calls)
        await wait_until(pilot, lambda: versions.loaded and not versions.view, what="empty")


@sync
async def test_models_view_from_the_command_line_and_key() -> None:
    app = fake_app(("experiments", None))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen), what="models")
