"""det-tui: the full-screen terminal UI of detlab.

    det-tui [-m URL] [--readonly] [VIEW [ID]]

VIEW is one of `gpu`, `agents`, `queue`, `exps`, `exp ID`, `trial ID`, `logs ID`, `models`
(default `exps`).
Inside, `:` opens the same views, `?` lists every key.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen, Screen

from detlab.constants import DEFAULT_MASTER_URL
from harness.api import DetError, NotFound
from tui.api import ClusterAPI
from tui.data import JSON, Freshness, History, Poller
from tui.screens.cluster import ClusterScreen, agent_rows, slot_key, slot_rows, summarize
from tui.screens.common import Help, Prompt, ViewScreen, key_label
from tui.screens.experiment import ExperimentScreen
from tui.screens.experiments import ExperimentsScreen
from tui.screens.logs import LogsScreen
from tui.screens.models import ModelsScreen
from tui.screens.queue import COLUMNS as QUEUE_COLUMNS
from tui.screens.queue import NOT_AVAILABLE, QueueScreen, queue_rows
from tui.screens.trial import TrialScreen
from tui.widgets.header import HeaderBar, Summary, header_text
from tui.widgets.table import Row, RowCache, column_widths

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
}
NEEDS_ID = {"exp", "trial", "logs"}
COMMANDS = [
    "queue",
    "exps",
    "exp ",
    "trial ",
    "logs ",
    "gpu",
    "agents",
    "models",
    "help",
    "quit",
]


@dataclass
class ClusterData:
    """What the app-wide poller fetched (agents + job queue), with table rows built off-thread."""

    agents: list[JSON]
    pools: list[JSON] | None
    queue_error: str | None
    summary: dict[str, int | None]
    agent_rows: list[Row]
    slot_rows: list[Row]
    queue_rows: dict[str, list[Row]] = field(default_factory=dict)
    queue_widths: dict[str, list[int]] = field(default_factory=dict)
    elastic: list[JSON] = field(default_factory=list)  # provider pools (elastic agents)


class DetTUI(App):
    CSS_PATH = "app.tcss"
    TITLE = "det-tui"
    ENABLE_COMMAND_PALETTE = False
    MODES: ClassVar[dict[str, Any]] = {
        "cluster": ClusterScreen,
        "queue": QueueScreen,
        "experiments": ExperimentsScreen,
        "models": ModelsScreen,
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("colon", "palette", ":cmd"),
        Binding("question_mark", "help", "Help"),
        Binding("1", "view('cluster')", "GPUs", show=False),
        Binding("2", "view('queue')", "Queue", show=False),
        Binding("3", "view('experiments')", "Exps", show=False),
        Binding("4", "view('models')", "Models", show=False),
        Binding("q", "quit", "Quit", show=False),
    ]

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
        self.api = api
        self.readonly = readonly
        self.start = start
        self.clock = clock
        self.interval = interval
        self.interval_scale = interval_scale
        self.max_log_lines = max_log_lines
        self.user: JSON | None = user
        self.freshness = Freshness(clock)
        self.history = History(30)
        self.cluster: ClusterData | None = None
        self.toast_log: list[tuple[str, bool]] = []
        self.frame_seconds: list[float] = []  # UI-thread time per cluster refresh (benchmark)
        self._shown_errors: set[str] = set()
        self.cluster_poller: Poller | None = None
        self._row_caches: dict[str, RowCache] = {}

    # ---- startup --------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.cluster_poller = Poller(
            self,
            "cluster",
            self._fetch_cluster,
            self._apply_cluster,
            interval=self.interval * self.interval_scale,
            on_error=self._cluster_error,
        ).start()
        self.set_interval(1.0, self.refresh_header)
        view, ident = self.start
        self.open_view(view, ident)

    @property
    def master_url(self) -> str:
        return str(getattr(self.api, "master", "?"))

    # ---- the app-wide poller: agents + job queue (header, GPU and queue views) -----------------
    def _fetch_cluster(self) -> ClusterData:
        if self.user is None:
            try:
                self.user = self.api.me()
            except NotFound:
                self.user = {}
        agents = self.api.list_agents()
        pools: list[JSON] | None
        queue_error = None
        try:
            pools = self.api.job_queues()
        except NotFound:
            pools, queue_error = None, NOT_AVAILABLE
        elastic: list[JSON] = []
        fetch_elastic = getattr(self.api, "provisioner_pools", None)
        if fetch_elastic is not None:
            try:
                elastic = fetch_elastic()
            except NotFound:  # a master without elastic agents
                elastic = []
        for a in agents:
            for s in a.get("slots", []):
                self.history.add(slot_key(a, s), (s.get("stats") or {}).get("util_percent"))
        now = self.clock()
        rows: dict[str, list[Row]] = {}
        widths: dict[str, list[int]] = {}
        for p in pools or []:
            cache = self._row_caches.setdefault(p["name"], RowCache())
            rows[p["name"]] = queue_rows(p, now, cache)
            cache.finish()
            widths[p["name"]] = column_widths(QUEUE_COLUMNS, rows[p["name"]])
        return ClusterData(
            agents=agents,
            pools=pools,
            queue_error=queue_error,
            summary=summarize(agents, pools),
            agent_rows=agent_rows(agents, now),
            slot_rows=slot_rows(agents, self.history),
            queue_rows=rows,
            queue_widths=widths,
            elastic=elastic,
        )

    def _apply_cluster(self, data: ClusterData) -> None:
        t0 = time.perf_counter()
        self.cluster = data
        self.freshness_ok()
        for screen in self.screen_stack:
            if isinstance(screen, ClusterScreen | QueueScreen) and screen.is_mounted:
                screen.on_cluster_data()
        self.frame_seconds.append(time.perf_counter() - t0)

    def _cluster_error(self, error: BaseException) -> None:
        if isinstance(error, DetError) and not isinstance(error, NotFound):
            from harness.api import MasterUnreachable

            if isinstance(error, MasterUnreachable):
                self.freshness_failed(str(error))
                return
        message = str(error) or type(error).__name__
        if message not in self._shown_errors:
            self._shown_errors.add(message)
            self.toast(message, error=True)

    # ---- freshness + header ---------------------------------------------------------------------
    def freshness_ok(self) -> None:
        was_down = self.freshness.error is not None
        self.freshness.ok()
        if was_down:
            self.toast("master reachable again")
        self.refresh_header()

    def freshness_failed(self, message: str) -> None:
        self.freshness.failed(message)
        self.refresh_header()

    def top_view(self) -> ViewScreen | None:
        for screen in reversed(self.screen_stack):
            if not isinstance(screen, ModalScreen):
                return screen if isinstance(screen, ViewScreen) else None
        return None

    def refresh_header(self) -> None:
        view = self.top_view()
        if view is None or not view.is_mounted:
            return
        s = self.cluster.summary if self.cluster else {}
        text = header_text(
            view.title_text,
            self.master_url,
            (self.user or {}).get("username"),
            Summary(**s) if s else Summary(),
            self.freshness,
            self.clock(),
            self.readonly,
        )
        for header in view.query(HeaderBar):
            header.set_text(text)

    # ---- navigation -----------------------------------------------------------------------------
    def open_view(self, view: str, ident: int | str | None = None) -> None:
        kind = VIEWS.get(view, view)
        if kind in NEEDS_ID:
            try:
                ident = int(str(ident).strip())
            except (TypeError, ValueError):
                self.toast(f"{kind} needs a numeric id: :{kind} ID", error=True)
                return
        if kind in ("cluster", "agents"):
            self._switch("cluster")
            focus = "#agents" if kind == "agents" else "#slots"
            self.call_after_refresh(self._focus_in_cluster, focus)
        elif kind in ("queue", "experiments", "models"):
            self._switch(kind)
        elif kind == "exp":
            self.push_screen(ExperimentScreen(int(ident)))  # type: ignore[arg-type]
        elif kind == "trial":
            self.push_screen(TrialScreen(int(ident)))  # type: ignore[arg-type]
        elif kind == "logs":
            self.push_screen(LogsScreen(int(ident)))  # type: ignore[arg-type]
        else:
            self.toast(f"unknown view {view!r}: try :queue, :exps, :exp ID, :gpu", error=True)

    def _switch(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)
        else:
            while len(self.screen_stack) > 1:
                self.pop_screen()

    def _focus_in_cluster(self, selector: str) -> None:
        screen = self.top_view()
        if isinstance(screen, ClusterScreen):
            screen.query_one(selector).focus()

    def action_view(self, mode: str) -> None:
        self.open_view(mode)

    def action_palette(self) -> None:
        self.push_screen(
            Prompt(
                ":",
                suggestions=COMMANDS,
                hint="queue · exps · exp ID · trial ID · logs ID · gpu · agents · help · quit",
            ),
            self.run_command,
        )

    def run_command(self, command: str | None) -> None:
        if not command:
            return
        parts = command.strip().lstrip(":").split()
        if not parts:
            return
        name, args = parts[0].lower(), parts[1:]
        if name in ("q", "quit", "exit", "q!") and not args:
            self.exit()
        elif name in ("help", "h"):
            self.action_help()
        elif name in VIEWS:
            self.open_view(name, args[0] if args else None)
        else:
            self.toast(f"unknown command :{command.strip()}", error=True)

    def action_help(self) -> None:
        view = self.top_view()
        keys: list[tuple[str, str]] = []
        seen: set[str] = set()
        for _key, active in self.screen.active_bindings.items():
            b = active.binding
            if active.node is self or b.action in seen or not b.description:
                continue
            if type(active.node).__name__ == "ResourceTable":
                continue
            if not active.enabled or (
                view is not None and view.check_action(b.action.split("(")[0], ()) is False
            ):
                continue
            seen.add(b.action)
            keys.append((key_label(b.key), b.description))
        self.push_screen(Help(view.title_text if view else "det-tui", keys))

    # ---- actions on the master ------------------------------------------------------------------
    def toast(self, message: str, error: bool = False) -> None:
        self.toast_log.append((message, error))
        self.notify(
            message, severity="error" if error else "information", timeout=6 if error else 3
        )

    def call_api(self, fn: Callable[[], str | None], poke: Screen | None = None) -> None:
        """Run `fn` (which calls the API) in a worker; toast its result or its error."""

        def work() -> None:
            try:
                message = fn()
            except DetError as e:
                self.call_from_thread(self.toast, str(e), True)
            else:
                self.call_from_thread(self._api_done, message, poke)
            finally:
                self.call_from_thread(self._poke_all)

        self.run_worker(work, thread=True, group="actions", exit_on_error=False)

    def _api_done(self, message: str | None, poke: Screen | None) -> None:
        if message:
            self.toast(message)

    def _poke_all(self) -> None:
        if self.cluster_poller is not None:
            self.cluster_poller.poke()
        for screen in self.screen_stack:
            if isinstance(screen, ViewScreen):
                screen.poke()

    def experiment_action(
        self, verb: str, exp_ids: Sequence[int], poke: Screen | None = None
    ) -> None:
        if not exp_ids:
            return
        method = getattr(self.api, f"{verb}_experiment")
        past = {"pause": "paused", "activate": "activated", "kill": "killed"}.get(verb, verb)

        def run() -> str:
            done, errors = [], []
            for i in exp_ids:
                try:
                    method(i)
                    done.append(str(i))
                except DetError as e:
                    errors.append(str(e))
            if errors:
                raise DetError("; ".join(errors))
            return f"{past} experiment {', '.join(done)}"

        self.call_api(run, poke)

    def open_experiment_logs(self, exp_id: int) -> None:
        def work() -> None:
            try:
                trials = self.api.describe_experiment(exp_id).get("trials") or []
            except DetError as e:
                self.call_from_thread(self.toast, str(e), True)
                return
            if not trials:
                self.call_from_thread(self.toast, f"experiment {exp_id} has no trials yet")
                return
            running = [t for t in trials if t.get("display_state") == "RUNNING"]
            pick = (running or sorted(trials, key=lambda t: t["id"]))[-1 if not running else 0]
            self.call_from_thread(self.open_view, "logs", pick["id"])

        self.run_worker(work, thread=True, group="actions", exit_on_error=False)


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
        help="gpu | agents | queue | exps | exp ID | trial ID | logs ID",
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
