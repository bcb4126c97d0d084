"""`det-agent`: join a detlab cluster and run its trials on this machine."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from agent import __version__
from agent.agent import Agent
from agent.client import AgentClient
from agent.credential import CredentialError, credential_path, exchange, read_credential
from agent.devices import discover_slots
from agent.identity import DERIVED_UID_BASE, Isolation, Mode
from agent.images import BUILD_HINT, default_image, slot_kind
from agent.logs import LogShipper
from agent.modeldef import ModelDefCache
from agent.runtime import Runtime, RuntimeContext
from agent.runtime._dirs import prepare_agent_dirs
from detlab.constants import DEFAULT_MASTER_URL
from harness.api import Session

log = logging.getLogger("agent")

DEFAULT_MASTER = DEFAULT_MASTER_URL
TOKEN_FILE = "agent_token"
RUNTIMES = ("auto", "docker", "process")


def default_data_dir() -> Path:
    return Path(os.environ.get("DET_DATA_DIR") or Path.home() / ".local" / "share" / "detlab")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="det-agent", description="Run a detlab cluster's trials on this machine."
    )
    p.add_argument(
        "--master",
        default=os.environ.get("DET_MASTER") or DEFAULT_MASTER,
        help="master URL (default: $DET_MASTER or %(default)s)",
    )
    p.add_argument("--agent-id", default=None, help="this agent's id (default: the hostname)")
    p.add_argument(
        "--slots",
        type=int,
        default=None,
        metavar="N",
        help="offer N artificial CPU slots (default: one slot per GPU, else one CPU slot)",
    )
    p.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default=os.environ.get("DET_AGENT_RUNTIME") or "auto",
        help="how trials run: docker (a container per trial), process (local processes), or "
        "auto: docker when the Docker engine answers, else process (default: "
        "$DET_AGENT_RUNTIME or auto)",
    )
    p.add_argument(
        "--no-warm-start",
        dest="warm_start",
        action="store_false",
        default=os.environ.get("DET_AGENT_WARM_START", "1") != "0",
        help="process runtime: start every trial as a fresh interpreter instead of forking "
        "`python3 script.py`/`python3 -m module` entrypoints from a warm one (default: warm; "
        "DET_AGENT_WARM_START=0 turns it off)",
    )
    p.add_argument(
        "--container-master-url",
        default=os.environ.get("DET_CONTAINER_MASTER_URL") or None,
        metavar="URL",
        help="docker: the master's URL as seen from inside a container (default: the --master "
        "URL with host networking; with another network, a loopback host is replaced by the "
        "network's gateway)",
    )
    p.add_argument(
        "--container-network",
        default="host",
        metavar="NETWORK",
        help="docker: the containers' network: host (default), bridge, or a network's name",
    )
    p.add_argument(
        "--container-memory-limit",
        default=os.environ.get("DET_CONTAINER_MEMORY_LIMIT") or None,
        metavar="SIZE",
        help="docker: the most memory one trial container may use, e.g. 32g (default: no "
        "limit); a trial going over it is OOM-killed and the trial log says so",
    )
    p.add_argument(
        "--keep-failed-containers",
        type=int,
        default=3,
        metavar="N",
        help="docker: keep the newest N failed containers for debugging (default: 3)",
    )
    p.add_argument(
        "--shared-unisolated",
        action="store_true",
        default=os.environ.get("DET_AGENT_SHARED_UNISOLATED", "") == "1",
        help="run every user's trials as this agent's own Unix user: trials can then read each "
        "other's data and this agent's credential (default: off; an agent that is not root "
        "then runs only trials of the detlab user linked to its own uid; "
        "DET_AGENT_SHARED_UNISOLATED=1 turns it on)",
    )
    p.add_argument(
        "--derived-uid-base",
        type=int,
        default=DERIVED_UID_BASE,
        metavar="UID",
        help="trials of a detlab user not linked to a Unix user run as uid = gid = UID + the "
        "user's id (default: %(default)s)",
    )
    p.add_argument("--resource-pool", default="default", help="resource pool to join")
    p.add_argument(
        "--interruption-url",
        default=os.environ.get("DET_AGENT_INTERRUPTION_URL") or None,
        metavar="URL",
        help="the cloud's spot/preemptible interruption notice (metadata URL) to watch; on a "
        "notice the master requeues this agent's trials (default: $DET_AGENT_INTERRUPTION_URL, "
        "or none)",
    )
    p.add_argument(
        "--interruption-interval",
        type=float,
        default=float(os.environ.get("DET_AGENT_INTERRUPTION_INTERVAL") or 5.0),
        metavar="SECONDS",
        help="how often to read the interruption notice (default: 5)",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="default: $DET_DATA_DIR or "
        "~/.local/share/detlab (where a local master writes the agent token)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="trial working directories (default: <data-dir>/agent-<id>)",
    )
    p.add_argument(
        "--kill-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="SIGTERM to SIGKILL delay when stopping a trial (default: 10)",
    )
    p.add_argument(
        "--poll-wait",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="long-poll wait (default: 20)",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("DET_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
    )
    p.add_argument("--version", action="version", version=f"det-agent {__version__}")
    args = p.parse_args(argv)
    if args.slots is not None and args.slots < 1:
        p.error("--slots must be at least 1")
    if args.keep_failed_containers < 0:
        p.error("--keep-failed-containers must not be negative")
    if args.kill_grace < 0 or args.poll_wait < 0:
        p.error("--kill-grace and --poll-wait must not be negative")
    args.agent_id = args.agent_id or socket.gethostname()
    args.data_dir = (args.data_dir or default_data_dir()).expanduser()
    args.work_dir = (args.work_dir or args.data_dir / f"agent-{args.agent_id}").expanduser()
    return args


def agent_secret(args: argparse.Namespace) -> tuple[str, bool]:
    """(secret, is_credential): this agent's own credential kept in its data dir, else the
    cluster's join token to exchange for one (`exchange_join_token`). Raises CredentialError."""
    credential = read_credential(credential_path(args.data_dir, args.agent_id))
    if credential:
        return credential, True
    token = read_token(args.data_dir)
    if not token:
        raise CredentialError(
            "no agent token: the master writes the cluster's agent token to "
            f"{TOKEN_FILE} in the MASTER's data dir (det-master --data-dir; scripts/quickstart: "
            ".data/quickstart/agent_token). On another machine: DET_AGENT_TOKEN=$(ssh MASTER-HOST "
            f"cat MASTER-DATA-DIR/{TOKEN_FILE}) det-agent --master URL. On the master's machine, "
            f"give det-agent the master's --data-dir (this agent looked in "
            f"{args.data_dir / TOKEN_FILE})"
        )
    return token, False


def exchange_join_token(args: argparse.Namespace, token: str) -> str:
    return exchange(
        args.master, token, args.agent_id, credential_path(args.data_dir, args.agent_id)
    )


def read_token(data_dir: Path) -> str | None:
    """The cluster's agent token: $DET_AGENT_TOKEN, else the file a local master wrote."""
    token = os.environ.get("DET_AGENT_TOKEN", "").strip()
    if token:
        return token
    try:
        return (data_dir / TOKEN_FILE).read_text().strip() or None
    except OSError:
        return None


def make_runtime(name: str, ctx: RuntimeContext, docker_options: Any = None) -> Runtime:
    """The runtime named by --runtime. `auto` is docker when the engine answers, else process;
    a log line says which runtime, why, and what trials run in (see `runtime_note`). Raises for
    `docker` when the engine cannot be used."""
    why = f"--runtime {name}"
    if name in ("docker", "auto"):
        try:
            from agent.runtime.docker import DockerRuntime, DockerUnavailable
        except ImportError as e:  # pragma: no cover - the SDK is a dependency
            if name == "docker":
                raise
            why = f"--runtime auto and the docker runtime cannot load ({e})"
        else:
            try:
                runtime: Runtime = DockerRuntime(ctx, docker_options)
            except DockerUnavailable as e:
                if name == "docker":
                    raise
                why = f"--runtime auto and {e}"
            else:
                if name == "auto":
                    why = "--runtime auto and the Docker engine answers"
                log.info("%s", runtime_note(runtime, why, ctx.slots))
                return runtime
    if name in ("process", "auto"):
        from agent.runtime.process import ProcessRuntime

        runtime = ProcessRuntime(ctx)
        log.info("%s", runtime_note(runtime, why, ctx.slots))
        return runtime
    raise ValueError(f"unknown runtime {name!r}")


def runtime_note(runtime: Runtime, why: str, slots: list[dict[str, Any]]) -> str:
    """One line for the agent's log: the runtime, why, and what a trial runs in by default."""
    if runtime.name != "docker":
        return (
            f"runtime {runtime.name} ({why}): trials run as local processes; `python3` in an "
            f"entrypoint is {sys.executable} (its packages are what trials can import)"
        )
    gpu = any(s.get("type") == "gpu" for s in slots)
    image = default_image(gpu)
    present = getattr(runtime, "image_present", lambda _image: True)(image)
    state = (
        "present here"
        if present
        else f"NOT on this machine and no registry has it: build it with {BUILD_HINT}, or trials "
        "that name no image fail"
    )
    return (
        f"runtime docker ({why}): a container per trial; trials that name no environment.image "
        f"run in {image} (the default for {slot_kind(gpu)} slots; {state})"
    )


def docker_options(args: argparse.Namespace) -> Any:
    from agent.runtime.docker import DockerOptions

    return DockerOptions(
        container_master_url=args.container_master_url,
        network=args.container_network,
        keep_failed=args.keep_failed_containers,
        memory_limit=args.container_memory_limit,
    )


def setup_logging(level: str, agent_id: str) -> None:
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s %(levelname)s [agent {agent_id}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level, args.agent_id)

    isolation = Isolation.detect(shared=args.shared_unisolated, derived_base=args.derived_uid_base)
    if isolation.mode == Mode.ISOLATED:
        log.info("trials: %s", isolation.describe())
    else:
        log.warning("trials: %s", isolation.describe())
    keep = os.environ.get("DET_AGENT_KEEP_WORKDIRS", "") == "1"
    try:
        slots = discover_slots(args.slots)
        prepare_agent_dirs(args.data_dir, args.work_dir, isolation.mode == Mode.ISOLATED)
        secret, is_credential = agent_secret(args)
    except (ValueError, OSError, CredentialError) as e:
        print(f"det-agent: {e}", file=sys.stderr)
        return 2
    # The join token is not the agent's to keep; trials never see either (agent/runtime/_env.py).
    os.environ.pop("DET_AGENT_TOKEN", None)

    session = Session(args.master, secret)
    client = AgentClient(session, args.agent_id)
    shipper = LogShipper(client).start()
    ctx = RuntimeContext(
        work_dir=args.work_dir,
        master_url=session.master,
        agent_id=args.agent_id,
        slots=slots,
        log_sink=shipper.add,
        log_delivery=shipper,
        kill_grace=args.kill_grace,
        keep_workdirs=keep,
        warm_start=args.warm_start,
        isolation=isolation,
    )
    try:
        runtime = make_runtime(args.runtime, ctx, docker_options(args))
    except Exception as e:  # e.g. the Docker daemon is unreachable
        print(f"det-agent: cannot start the {args.runtime} runtime: {e}", file=sys.stderr)
        return 2
    if not is_credential:  # after the checks above: a misconfigured agent takes no credential
        try:
            session.token = exchange_join_token(args, secret)
        except CredentialError as e:
            runtime.shutdown(timeout=1)
            print(f"det-agent: {e}", file=sys.stderr)
            return 2

    agent = Agent(
        agent_id=args.agent_id,
        client=client,
        runtime=runtime,
        shipper=shipper,
        model_defs=ModelDefCache(args.work_dir / "cache", client),
        slots=slots,
        resource_pool=args.resource_pool,
        poll_wait=args.poll_wait,
        isolation=isolation,
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if agent.stopping.is_set():
            # A second signal: the user will not wait for the grace. Trials die with us
            # (PR_SET_PDEATHSIG) and the master restarts them elsewhere.
            log.warning("received %s again: exiting now", name)
            os._exit(1)
        log.info("received %s: stopping trials (send it again to exit at once)", name)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    slot_desc = ", ".join(f"{s['type']}{s['index']} {s['name']}" for s in slots)
    log.info(
        "det-agent %s: master %s, pool %r, runtime %s, slots: %s, work dir %s",
        __version__,
        session.master,
        args.resource_pool,
        runtime.name,
        slot_desc,
        args.work_dir,
    )
    if args.interruption_url:
        from agent.interruption import InterruptionWatcher

        InterruptionWatcher(
            args.interruption_url,
            client.interruption,
            agent.stopping,
            max(0.1, args.interruption_interval),
        ).start()
    rc = agent.serve()
    if agent.fatal:
        print(f"det-agent: {agent.fatal}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
