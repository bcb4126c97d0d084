"""det-tui: the full-screen terminal UI of detlab.

    det-tui [-m URL] [--readonly] [VIEW [ID]]

VIEW is one of `gpu`, `agents`, `queue`, `exps`, `exp ID`, `trial ID`, `logs ID`, `models`,
`tasks` (default `exps`).
Inside, `:` opens the same views, `?` lists every key.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import var
from textual.screen import ModalScreen
from textual.widgets import Input
from textual.worker import Worker, get_current_worker

from detlab.constants import DEFAULT_MASTER_URL
from harness.api import DetError, MasterUnreachable, NotFound
from tui.api import ClusterAPI
from tui.context import Context
from tui.data import JSON, ClusterData, Freshness, History, slot_key, summarize
from tui.messages import MasterChanged, MasterStatus, OpenView, Toast
from tui.screens.cluster import ClusterScreen
from tui.screens.common import Help, ViewScreen
from tui.screens.experiment import ExperimentScreen
from tui.screens.experiments import ExperimentsScreen
from tui.screens.logs import LogsScreen
from tui.screens.models import ModelsScreen
from tui.screens.queue import NOT_AVAILABLE, QueueScreen
from tui.screens.tasks import TasksScreen
from tui.screens.trial import TrialScreen

DEFAULT_MASTER = DEFAULT_MASTER_URL
VIEWS = {
    "gpu": "cluster",
    "gpus": "cluster",
    "cluster": "cluster",
    "agents": "agents",
    "agent": "agents",
    "queue": "queue",
    "jobs": "queue",
    "q": "queue",
    "exps": "experiments",
    "experiments": "experiments",
    "exp": "exp",
    "experiment": "exp",
    "trial": "trial",
    "t": "trial",
    "logs": "logs",
    "log": "logs",
    "models": "models",
    "model": "models",
    "tasks": "tasks",
    "task": "tasks",
}
# A task's log (a command's: its id is not a number); opened from the tasks view only.
TASK_LOGS = "task-logs"
NEEDS_ID = {"exp", "trial", "logs"}
QUIT = {"q", "quit", "exit", "q!"}
COMMANDS = [
    "queue",
    "exps",
    "exp ",
    "trial ",
    "logs ",
    "gpu",
    "agents",
    "models",
    "tasks",
    "help",
    "quit",
]
# The base view of each mode (its own stack of pushed views: an experiment, a trial, logs).
MODE_SCREENS: dict[str, type[ViewScreen]] = {
    "cluster": ClusterScreen,
    "queue": QueueScreen,
    "experiments": ExperimentsScreen,
    "models": ModelsScreen,
    "tasks": TasksScreen,
}


class ClusterFetched(Message):
    def __init__(self, data: ClusterData, worker: Worker | None = None) -> None:
        super().__init__()
        self.data = data
        self.worker = worker  # the fetch it came from: only the newest one's answer is shown


class ClusterFailed(Message):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error


class DetTUI(App):
    """The app: modes (one per top-level view), navigation, toasts, and the app-wide data.

    Data flow: a thread worker fetches agents + job queue + provider pools every `interval`
    seconds and publishes an immutable `ClusterData` through the reactive `cluster`; the header,
    the GPU view and the queue view `watch` it and build their rows in their own workers. Each
    view fetches its own data the same way. Views post messages (tui/messages.py) to open views,
    show toasts and report whether the master answered; the app never reaches into a view.
    """

    CSS_PATH = "app.tcss"
    TITLE = "det-tui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        # priority: runs before the next key is routed, so keys typed right after `:` land in
        # the prompt line however busy the machine is
        Binding("colon", "palette", ":cmd", priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("1", "view('cluster')", "GPUs", show=False),
        Binding("2", "view('queue')", "Queue", show=False),
        Binding("3", "view('experiments')", "Exps", show=False),
        Binding("4", "view('models')", "Models", show=False),
        Binding("5", "view('tasks')", "Tasks", show=False),
        Binding("q", "quit", "Quit", show=False),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    # `var`, not `reactive`: a reactive's change repaints its owner, and the app's repaint is a
    # full-screen render every refresh (most of det-tui's idle CPU); the watchers redraw what
    # they show themselves
    cluster: var[ClusterData | None] = var(None, always_update=True)
    freshness: var[Freshness] = var(Freshness)

    def __init__(
        self,
        api: ClusterAPI,
        *,
        readonly: bool = False,
        start: tuple[str, int | None] = ("experiments", None),
        clock: Callable[[], float] = time.time,
        interval: float = 2.0,
        interval_scale: float = 1.0,
        max_log_lines: int = 50_000,
        user: JSON | None = None,
    ) -> None:
        super().__init__()
        self.ctx = Context(
            api,
            clock=clock,
            readonly=readonly,
            max_log_lines=max_log_lines,
            interval_scale=interval_scale,
            user=user,
        )
        self.start = start
        self.interval = interval * interval_scale
        self.history = History(30)
        self.toast_log: list[tuple[str, bool]] = []
        self.fetch_seconds: deque[float] = deque(maxlen=200)  # worker time per refresh (bench)
        self._shown_errors: set[str] = set()
        self._cluster_worker: Worker | None = None
        for mode, screen in MODE_SCREENS.items():
            self.add_mode(mode, partial(screen, self.ctx))

    @property
    def api(self) -> ClusterAPI:
        return self.ctx.api

    @property
    def readonly(self) -> bool:
        return self.ctx.readonly

    # ---- startup --------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.refresh_timer = self.set_interval(self.interval, self.refresh_cluster)
        self.refresh_cluster()
        view, ident = self.start
        if VIEWS.get(view, view) in NEEDS_ID:
            self._switch("experiments")  # under it, so that Esc goes back to the list
        self.open_view(view, ident)

    def set_refresh_interval(self, seconds: float) -> None:
        self.refresh_timer.stop()
        self.interval = seconds
        self.refresh_timer = self.set_interval(seconds, self.refresh_cluster)

    # ---- the app-wide data: agents + job queue (header, GPU and queue views) -------------------
    def refresh_cluster(self, now: bool = False) -> Worker | None:
        """Fetch the app-wide data in a worker (returned); with `now`, a new fetch that replaces
        the running one, whose answer is then dropped."""
        running = self._cluster_worker
        if running is not None and running.is_running and not now:
            return None  # a slow master: never two refreshes at once
        self._cluster_worker = self._fetch_cluster()
        return self._cluster_worker

    @work(thread=True, exclusive=True, group="cluster", exit_on_error=False)
    def _fetch_cluster(self) -> None:
        worker = get_current_worker()
        t0 = time.perf_counter()
        try:
            data = self._cluster_snapshot()
        except MasterUnreachable as e:
            self.post_message(MasterStatus(str(e)))
            return
        except Exception as e:  # noqa: BLE001 - shown once, then retried
            if not worker.is_cancelled:
                self.post_message(ClusterFailed(e))
            return
        if worker.is_cancelled:
            return  # superseded by a newer refresh (after an action)
        self.fetch_seconds.append(time.perf_counter() - t0)
        self.post_message(MasterStatus(None))
        self.post_message(ClusterFetched(data, worker))

    def _cluster_snapshot(self) -> ClusterData:
        """Blocking API calls (worker thread)."""
        api = self.ctx.api
        user = self.ctx.user
        if user is None:
            try:
                user = api.me()
            except NotFound:
                user = {}
        agents = api.list_agents()
        pools: list[JSON] | None
        queue_error = None
        try:
            pools = api.job_queues()
        except NotFound:
            pools, queue_error = None, NOT_AVAILABLE
        elastic: list[JSON] = []
        fetch_elastic = getattr(api, "provisioner_pools", None)
        if fetch_elastic is not None:
            try:
                elastic = fetch_elastic()
            except NotFound:  # a master without elastic agents
                elastic = []
        for a in agents:
            for s in a.get("slots", []):
                self.history.add(slot_key(a, s), (s.get("stats") or {}).get("util_percent"))
        return ClusterData(
            agents=agents,
            pools=pools,
            queue_error=queue_error,
            summary=summarize(agents, pools),
            user=user,
            history=self.history.snapshot(),
            elastic=elastic,
        )

    def on_cluster_fetched(self, message: ClusterFetched) -> None:
        # Checked here, on the UI thread, where refreshes start: the worker's own is_cancelled
        # check can pass just before a newer refresh starts, and its older answer then lands
        # after the newer one and undoes it (a job moved by `K` jumped back until the next tick).
        if message.worker is not None and message.worker is not self._cluster_worker:
            return
        self.ctx.user = message.data.user
        self.cluster = message.data

    def on_cluster_failed(self, message: ClusterFailed) -> None:
        text = str(message.error) or type(message.error).__name__
        if text not in self._shown_errors:
            self._shown_errors.add(text)
            self.toast(text, error=True)

    # ---- messages from the views ----------------------------------------------------------------
    def on_master_status(self, message: MasterStatus) -> None:
        now = self.ctx.clock()
        if message.error is None:
            if self.freshness.error is not None:
                self.toast("master reachable again")
            self.freshness = self.freshness.ok(now)
        else:
            self.freshness = self.freshness.failed(message.error, now)

    def on_toast(self, message: Toast) -> None:
        self.toast(message.text, message.error)

    def on_open_view(self, message: OpenView) -> None:
        self.open_view(message.view, message.ident)

    def on_master_changed(self, message: MasterChanged) -> None:
        self.refresh_cluster(now=True)

    def toast(self, message: str, error: bool = False) -> None:
        self.toast_log.append((message, error))
        self.notify(
            message, severity="error" if error else "information", timeout=6 if error else 3
        )

    # ---- navigation -----------------------------------------------------------------------------
    def top_view(self) -> ViewScreen | None:
        for screen in reversed(self.screen_stack):
            if not isinstance(screen, ModalScreen):
                return screen if isinstance(screen, ViewScreen) else None
        return None

    def open_view(self, view: str, ident: int | str | None = None) -> None:
        if view == TASK_LOGS:
            self.push_screen(LogsScreen(self.ctx, task_id=str(ident)))
            return
        kind = VIEWS.get(view, view)
        if kind in NEEDS_ID:
            try:
                ident = int(str(ident).strip())
            except (TypeError, ValueError):
                self.toast(f"{kind} needs a numeric id: :{kind} ID", error=True)
                return
        if kind in ("cluster", "agents"):
            self._switch("cluster")
            screen = self.screen
            if isinstance(screen, ClusterScreen):
                screen.focus_table("agents" if kind == "agents" else "slots")
        elif kind in ("queue", "experiments", "models", "tasks"):
            self._switch(kind)
        elif kind == "exp":
            self.push_screen(ExperimentScreen(self.ctx, int(ident)))  # type: ignore[arg-type]
        elif kind == "trial":
            self.push_screen(TrialScreen(self.ctx, int(ident)))  # type: ignore[arg-type]
        elif kind == "logs":
            self.push_screen(LogsScreen(self.ctx, int(ident)))  # type: ignore[arg-type]
        else:
            self.toast(f"unknown view {view!r}: try :queue, :exps, :exp ID, :gpu", error=True)

    def _switch(self, mode: str) -> None:
        """Show `mode`'s list view: an experiment, trial or logs view opened on top of it
        earlier is closed (the view keys and `:exps` always show the list)."""
        if self.current_mode != mode:
            self.switch_mode(mode)
        while len(self.screen_stack) > 1:
            self.pop_screen()

    def action_view(self, mode: str) -> None:
        self.open_view(mode)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "palette":
            # `:` typed into an open prompt is a character; over the help or a question it is
            # nothing
            return not isinstance(self.focused, Input) and isinstance(self.screen, ViewScreen)
        return True

    def action_palette(self) -> None:
        view = self.top_view()
        if view is None or view is not self.screen:
            return
        view.ask(
            ":",
            suggestions=COMMANDS,
            hint="queue · exps · exp ID · trial ID · logs ID · gpu · agents · models · tasks · help"
            " · quit",
            on_submit=self.run_command,
        )

    def run_command(self, command: str | None) -> None:
        if not command:
            return
        parts = command.strip().lstrip(":").split()
        if not parts:
            return
        name, args = parts[0].lower(), parts[1:]
        if name not in VIEWS and name not in QUIT and name not in ("help", "h"):
            # what the prompt suggested while typing (the first command it starts)
            name = next((c.strip() for c in COMMANDS if c.startswith(name)), name)
        if name in QUIT and not args:
            self.exit()
        elif name in ("help", "h"):
            self.action_help()
        elif name in VIEWS:
            self.open_view(name, args[0] if args else None)
        else:
            self.toast(f"unknown command :{command.strip()}", error=True)

    def action_help(self) -> None:
        view = self.top_view()
        if view is None:
            return
        self.push_screen(Help(view.title_text, view.help_keys()))


HELP_EPILOG = "keys inside: `:` views, `?` help, `/` filter, Esc back, q quit"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="det-tui",
        description="detlab's terminal UI: GPUs, job queue, experiments, trials, logs.",
        epilog=HELP_EPILOG,
    )
    parser.add_argument("-m", "--master", help=f"master URL (DET_MASTER, else {DEFAULT_MASTER})")
    parser.add_argument("--readonly", action="store_true", help="hide every action")
    parser.add_argument(
        "--refresh", type=float, default=2.0, metavar="S", help="refresh interval (default 2 s)"
    )
    parser.add_argument(
        "--log-lines", type=int, default=50_000, help="log lines kept in memory (default 50000)"
    )
    parser.add_argument(
        "--demo", action="store_true", help="show fixed demo data instead of a master"
    )
    parser.add_argument(
        "view",
        nargs="?",
        default="exps",
        help="gpu | agents | queue | exps | exp ID | trial ID | logs ID | models | tasks",
    )
    parser.add_argument("id", nargs="?", help="the experiment or trial id")
    args = parser.parse_args(argv)
    kind = VIEWS.get(args.view)
    if kind is None:
        parser.error(f"unknown view {args.view!r}")
    if kind in NEEDS_ID and (args.id is None or not str(args.id).isdigit()):
        parser.error(f"{args.view} needs a numeric ID")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from harness.api import Client
    from harness.api.auth import check_reachable, login_session

    clock: Callable[[], float] = time.time
    if args.demo:
        from tui.fake import NOW, FakeClient

        api: ClusterAPI = FakeClient()
        clock = lambda: NOW  # noqa: E731 - the demo's timestamps are fixed
    else:
        master = args.master or os.environ.get("DET_MASTER") or DEFAULT_MASTER
        try:
            # A master that does not answer is said so first, whatever the login state.
            check_reachable(master)
            api = Client(login_session(master))
        except DetError as e:
            print(f"det-tui: {e}", file=sys.stderr)
            return 1
    app = DetTUI(
        api,
        readonly=args.readonly,
        clock=clock,
        start=(args.view, int(args.id) if args.id else None),
        interval=max(0.2, args.refresh),
        max_log_lines=args.log_lines,
    )
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
