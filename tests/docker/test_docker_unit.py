"""The docker runtime's pieces that need no engine: container specs, log positions, selection."""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path
from typing import Any

import pytest

from agent.identity import TaskIdentity
from agent.main import make_runtime, parse_args
from agent.runtime import RuntimeContext
from agent.runtime.docker import (
    LIB_DIR,
    WORKDIR,
    DockerOptions,
    DockerRuntime,
    DockerUnavailable,
    FrameFilter,
    LineAssembler,
    LogPos,
    ResentLines,
    _checked_model_def,
    iso_us,
    parse_ts,
)
from agent.runtime.docker._common import recovered_proxy_port
from agent.runtime.process import ProcessRuntime
from detlab.protocol import StartSpec


class _FakeAPI:
    def containers(self, **_: Any) -> list[dict]:
        return []


class _FakeNet:
    attrs = {"IPAM": {"Config": [{"Gateway": "172.17.0.1"}]}}


class _FakeNetworks:
    def get(self, _name: str) -> _FakeNet:
        return _FakeNet()


class FakeClient:
    api = _FakeAPI()
    networks = _FakeNetworks()

    def ping(self) -> bool:
        return True


def ctx(tmp_path: Path, slots: list[dict] | None = None, shipper: Any = None) -> RuntimeContext:
    return RuntimeContext(
        work_dir=tmp_path / "work",
        master_url="http://127.0.0.1:8080",
        agent_id="a1",
        slots=slots or [{"index": 0, "type": "cpu", "uuid": "cpu-0"}],
        log_sink=shipper.add if shipper else (lambda *_: None),
        log_delivery=shipper,
    )


def spec(**over: Any) -> StartSpec:
    base = {
        "allocation_id": "alloc-1",
        "trial_id": 7,
        "experiment_id": 3,
        "entrypoint": "python3 train.py --x 1",
        "slot_indexes": [0],
        "env": {"DET_TRIAL_ID": "7", "DET_SESSION_TOKEN": "tok"},
        "environment": {"image": "img:1", "environment_variables": {"A": "1", "DET_TRIAL_ID": "x"}},
        "bind_mounts": [{"host_path": "/data", "container_path": "/mnt/d", "read_only": True}],
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/detlab-ckpt-unit"},
    }
    base.update(over)
    return StartSpec.parse(base)


def test_cpu_container_spec(tmp_path: Path) -> None:
    rt = DockerRuntime(ctx(tmp_path), client=FakeClient())
    kw = rt.create_kwargs(spec(), "img:1", ["PATH=/usr/bin", "PYTHONPATH=/opt/img"])
    assert kw["command"] == ["python3", "train.py", "--x", "1"]
    assert kw["entrypoint"][:2] == ["/bin/sh", "-c"] and "startup-hook.sh" in kw["entrypoint"][2]
    assert kw["working_dir"] == WORKDIR and kw["network_mode"] == "host" and kw["init"] is True
    env = kw["environment"]
    assert env["A"] == "1" and env["DET_TRIAL_ID"] == "7"  # the master's DET_* win
    assert env["DET_MASTER"] == "http://127.0.0.1:8080" and env["DET_AGENT_ID"] == "a1"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["PYTHONPATH"] == f"{LIB_DIR}:{WORKDIR}:{LIB_DIR}/harness/_alias:/opt/img"
    assert "device_requests" not in kw
    assert kw["labels"]["ai.detlab.allocation"] == "alloc-1"
    assert kw["labels"]["ai.detlab.trial"] == "7" and kw["labels"]["ai.detlab.agent"] == "a1"
    mounts = {m["Target"]: m for m in kw["mounts"]}
    assert mounts[LIB_DIR]["ReadOnly"] is True
    assert mounts["/tmp/detlab-ckpt-unit"]["Source"] == "/tmp/detlab-ckpt-unit"  # same path
    assert mounts["/mnt/d"]["Source"] == "/data" and mounts["/mnt/d"]["ReadOnly"] is True


def test_a_container_runs_as_its_users_identity(tmp_path: Path) -> None:
    rt = DockerRuntime(ctx(tmp_path), client=FakeClient())
    ident = TaskIdentity(2_000_000_003, 2_000_000_003, None, None)
    kw = rt.create_kwargs(spec(), "img:1", ["HOME=/root"], ident)
    assert kw["user"] == "2000000003:2000000003"
    assert kw["entrypoint"][2].startswith("umask 077; ")
    assert kw["environment"]["HOME"] == WORKDIR
    assert "user" not in rt.create_kwargs(spec(), "img:1")


def test_gpu_container_gets_only_its_gpus(tmp_path: Path) -> None:
    slots = [
        {"index": i, "type": "gpu", "uuid": f"GPU-{i}", "name": "H100", "memory_mb": 1}
        for i in range(4)
    ]
    rt = DockerRuntime(ctx(tmp_path, slots), client=FakeClient())
    kw = rt.create_kwargs(spec(slot_indexes=[1, 3]), "img:1")
    (req,) = kw["device_requests"]
    assert req["Driver"] == "nvidia" and req["DeviceIDs"] == ["GPU-1", "GPU-3"]
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "NVIDIA_VISIBLE_DEVICES" not in kw["environment"]


def test_bridge_network_reaches_the_master_through_the_gateway(tmp_path: Path) -> None:
    rt = DockerRuntime(ctx(tmp_path), DockerOptions(network="bridge"), client=FakeClient())
    assert rt.master_url == "http://172.17.0.1:8080"
    rt = DockerRuntime(
        ctx(tmp_path), DockerOptions(container_master_url="http://m:9/"), client=FakeClient()
    )
    assert rt.master_url == "http://m:9"


def test_timestamps_and_positions() -> None:
    ns, iso = parse_ts("2026-11-21T14:09:44.264394479Z")
    assert iso == "2026-11-21T14:09:44.264394Z" and ns % 1_000_000_000 == 264394479
    assert LogPos(ns, 1).since_param() == f"{(ns - 1_000_000) // 10**9}.{(ns - 10**6) % 10**9:09d}"
    assert LogPos().since_param() is None
    # Resume after the 2nd of three frames sharing a timestamp: only the 3rd and later pass.
    f = FrameFilter(LogPos(100, 2))
    assert [f.accept(ns) for ns in (99, 100, 100, 100, 101)] == [False, False, False, True, True]
    assert (f.cur.ns, f.cur.count) == (101, 1)
    f = FrameFilter(LogPos())
    assert all(f.accept(ns) for ns in (5, 5, 5)) and (f.cur.ns, f.cur.count) == (5, 3)
    assert f.accept(4) and (f.cur.ns, f.cur.count) == (5, 3)  # out of order: never backwards


def test_partial_frames_make_one_line() -> None:
    a = LineAssembler()
    assert a.feed("stdout", "t1", "abc") is None
    assert a.feed("stderr", "t2", "err\n") == "err"
    assert a.feed("stdout", "t3", "def\r\n") == "abcdef"
    assert a.first_iso("stdout") == "t1"
    a.feed("stdout", "t4", "tail")
    assert a.rest() == [("stdout", "t4", "tail")]


class Shipper:
    """The LogShipper's surface a runtime uses (`add`, and `agent.runtime.LogDelivery`): `add`
    ships at once through `client` and then reports the delivery, as LogShipper does."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.listeners: list[Any] = []

    def add(self, aid: str, stream: str, line: str, timestamp: str | None = None) -> None:
        batch = [{"allocation_id": aid, "stream": stream, "line": line, "timestamp": timestamp}]
        self.client.ship_logs(batch)
        for listener in self.listeners:
            listener(batch)

    def on_delivered(self, listener: Any) -> None:
        self.listeners.append(listener)

    def stored_tail(self, aid: str, limit: int = 2000) -> list[dict]:
        return self.client.log_tail(aid)


def test_delivery_tap_moves_the_saved_position(tmp_path: Path) -> None:
    shipped: list[list[dict]] = []

    class Client:
        def ship_logs(self, lines: list[dict]) -> None:
            shipped.append(lines)

    shipper = Shipper(Client())
    rt = DockerRuntime(ctx(tmp_path, shipper=shipper), client=FakeClient())
    assert shipper.listeners == [rt._on_delivered]
    from agent.runtime.docker import _LogState

    st = _LogState(rt._state_path("alloc-1"), "cid", LogPos())
    rt._logs["alloc-1"] = st
    rt._emit("alloc-1", "stdout", "t1", "hello", LogPos(10, 1))
    rt._emit("alloc-1", "stdout", "t2", "world", LogPos(11, 1))
    assert (st.delivered.ns, st.delivered.count) == (11, 1) and not st.pending
    assert '"ns": 11' in st.path.read_text()


def test_resent_lines_drop_the_overlap_then_nothing() -> None:
    stored = [
        ("stdout", 5, "tick 1"),  # before the delivered position: not a candidate
        ("stderr", 6, "[det-agent] restarted"),
        ("stdout", 7, "tick 2"),
        ("stdout", 8, "tick 3"),
    ]
    r = ResentLines(stored, after_us=6)
    assert not r.drop("stdout", 5, "tick 1")  # not stored at or after the position: new
    r = ResentLines(stored, after_us=6)
    assert r.drop("stdout", 7, "tick 2") and r.drop("stdout", 8, "tick 3") and r.done
    assert not r.drop("stdout", 9, "tick 4")
    r = ResentLines(stored, after_us=6)
    assert not r.drop("stdout", 7, "tick 2 changed") and r.done  # the overlap ended
    assert not r.drop("stdout", 8, "tick 3")
    assert ResentLines([], after_us=0).done
    assert iso_us("1970-01-01T00:00:01.000002Z") == 1_000_002
    assert iso_us("2026-11-21T14:09:44.264394+00:00") == iso_us("2026-11-21T14:09:44.264394Z")


def test_a_reattached_log_skips_lines_the_master_already_has(tmp_path: Path) -> None:
    shipped: list[str] = []
    t = [f"2026-11-21T10:00:00.{i:06d}Z" for i in range(6)]

    class Client:
        def ship_logs(self, lines: list[dict]) -> None:
            shipped.extend(x["line"] for x in lines)

        def log_tail(self, aid: str) -> list[dict]:
            # Delivered (and stored) before the agent died, but its delivery never recorded.
            return [
                {"stream": "stdout", "timestamp": t[1], "line": "tick 1"},
                {"stream": "stdout", "timestamp": t[2], "line": "tick 2"},
                {"stream": "stdout", "timestamp": t[3], "line": "tick 3"},
            ]

    shipper = Shipper(Client())
    rt = DockerRuntime(ctx(tmp_path, shipper=shipper), client=FakeClient())
    from agent.runtime.docker import _LogState

    saved = LogPos(iso_us(t[1]) * 1000, 1)  # the saved position: tick 1
    st = _LogState(rt._state_path("alloc-1"), "cid", saved)
    rt._logs["alloc-1"] = st
    st.resent = rt._resent_lines("alloc-1", saved)
    for i in (2, 3, 4, 5):  # what the engine hands back after the saved position
        rt._emit("alloc-1", "stdout", t[i], f"tick {i}", LogPos(iso_us(t[i]) * 1000, 1))
    assert shipped == ["tick 4", "tick 5"]
    assert st.resent is None and st.delivered.ns == iso_us(t[5]) * 1000


def test_model_def_escaping_its_directory_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar.gz"
    (tmp_path / "f").write_text("x")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(tmp_path / "f", arcname="../../etc/evil")
    with pytest.raises(ValueError, match="outside the destination"):
        _checked_model_def(evil)
    assert _checked_model_def(None) is None


def test_auto_falls_back_to_process_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    c = ctx(tmp_path)
    c.work_dir.mkdir(parents=True)
    with caplog.at_level(logging.INFO):
        rt = make_runtime("auto", c)
    try:
        assert isinstance(rt, ProcessRuntime)
        assert "runtime process (--runtime auto and the Docker engine does not answer" in (
            caplog.text
        )
        assert "trials run as local processes" in caplog.text
    finally:
        rt.shutdown(timeout=1)
    with pytest.raises(DockerUnavailable, match="does not answer"):
        make_runtime("docker", c)


def test_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_AGENT_RUNTIME", raising=False)
    args = parse_args([])
    assert args.runtime == "auto" and args.container_network == "host"
    assert args.keep_failed_containers == 3 and args.container_master_url is None
    args = parse_args(["--runtime", "docker", "--container-master-url", "http://h:1"])
    assert args.runtime == "docker" and args.container_master_url == "http://h:1"
    monkeypatch.setenv("DET_AGENT_RUNTIME", "process")
    assert parse_args([]).runtime == "process"


def test_a_new_request_of_the_log_skips_what_was_taken() -> None:
    """Each request of a container's log starts 1 ms before the position (since_param): the
    frames of that millisecond come again and must not be emitted twice (they were: the last
    line of every Docker trial came out twice)."""
    f = FrameFilter(LogPos())
    assert all(f.accept(ns) for ns in (10, 20, 20))
    again = f.resumed()
    assert [again.accept(ns) for ns in (19, 20, 20, 20, 21)] == [False, False, False, True, True]
    assert (again.cur.ns, again.cur.count) == (21, 1)


def test_short_reads_neither_end_the_stream_nor_cut_a_frame() -> None:
    from agent.runtime.docker._pipeline import read_exactly

    class Trickle:  # returns at most 3 bytes a read, like a chunked response can
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, n: int) -> bytes:
            out, self.data = self.data[: min(n, 3)], self.data[min(n, 3) :]
            return out

    raw = Trickle(b"0123456789abc")
    assert read_exactly(raw, 8) == b"01234567"
    assert read_exactly(raw, 8) == b"89abc"  # the end: what is left
    assert read_exactly(raw, 8) == b""


def test_an_owned_work_dir_is_put_at_its_parent_with_the_model_inside() -> None:
    """The work dir entry itself must be in the archive (put at WORKDIR's parent): Docker keeps
    the owner of an existing directory that a "." entry names, and had made it root's."""
    import io

    from agent.runtime.docker._common import owned_workdir_tar

    src = io.BytesIO()
    with tarfile.open(fileobj=src, mode="w") as t:
        for name, data in ((".", None), ("./train.py", b"print(1)\n")):
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("./same.py")
        link.type, link.linkname = tarfile.LNKTYPE, "./train.py"
        t.addfile(link)
    out = owned_workdir_tar(src.getvalue(), 1234, 4321)
    with tarfile.open(fileobj=io.BytesIO(out)) as t:
        members = {m.name: m for m in t.getmembers()}
        assert list(members) == ["workdir", "workdir/train.py", "workdir/same.py"]
        top = members["workdir"]
        assert top.isdir() and (top.uid, top.gid, top.mode) == (1234, 4321, 0o700)
        assert all((m.uid, m.gid) == (1234, 4321) for m in members.values())
        assert members["workdir/same.py"].linkname == "workdir/train.py"
        f = t.extractfile("workdir/train.py")
        assert f is not None and f.read() == b"print(1)\n"
    assert WORKDIR.endswith("/workdir")
    empty = owned_workdir_tar(None, 5, 6)
    with tarfile.open(fileobj=io.BytesIO(empty)) as t:
        assert [m.name for m in t.getmembers()] == ["workdir"]


@pytest.mark.parametrize("network", ["host", "bridge"])
def test_a_proxied_task_gets_a_port_the_master_reaches(tmp_path: Path, network: str) -> None:
    """A notebook's or shell's port: the host's own on the host network, else published on the
    host under the same number, so the master's proxy reaches it at the agent's address."""
    rt = DockerRuntime(ctx(tmp_path), DockerOptions(network=network), client=FakeClient())
    kw = rt.create_kwargs(spec(proxy=True), "img:1")
    port = rt._serve_port(kw)
    assert 0 < port < 65536 and kw["environment"]["DET_TASK_PORT"] == str(port)
    # Labelled: a restarted agent reports it again (recovered_proxy_port).
    assert kw["labels"]["ai.detlab.proxy-port"] == str(port)
    if network == "host":
        assert "ports" not in kw
    else:
        assert kw["ports"] == {f"{port}/tcp": port}


@pytest.mark.parametrize(
    ("labels", "env", "port"),
    [
        ({"ai.detlab.proxy-port": "41234"}, None, 41234),
        # The label wins over an environment a user could have set.
        ({"ai.detlab.proxy-port": "41234"}, ["DET_TASK_PORT=1"], 41234),
        # A container of an agent from before the label: the agent's DET_TASK_PORT (set last).
        ({}, ["DET_TASK_PORT=9", "A=1", "DET_TASK_PORT=40000"], 40000),
        ({}, ["A=1"], None),  # a trial
        ({}, None, None),
        ({"ai.detlab.proxy-port": "nope"}, None, None),
        ({"ai.detlab.proxy-port": "70000"}, None, None),
        ({}, ["DET_TASK_PORT=0"], None),
    ],
)
def test_a_reattached_containers_proxy_port(
    labels: dict[str, str], env: list[str] | None, port: int | None
) -> None:
    assert recovered_proxy_port(labels, env) == port
