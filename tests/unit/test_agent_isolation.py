"""Isolation on the agent, piece by piece: whom a task runs as (pure), the directories it gets,
the credential file, the verified model-definition cache, and real processes switching identity
(these tests run as root, as the agent does by default)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.credential import credential_path, read_credential, save_credential
from agent.identity import DERIVED_UID_BASE, IdentityRefused, Isolation, Mode, TaskIdentity
from agent.modeldef import ModelDefCache
from agent.runtime import RuntimeContext
from agent.runtime._dirs import hand_over, make_task_dir, prepare_checkpoint_dir
from agent.runtime._env import EnvLayout, task_env
from agent.runtime.docker._common import owned_workdir_tar
from agent.runtime.process import ProcessRuntime
from detlab.protocol import StartSpec, TaskUser
from tests.unit.runtime_support import REPO, Sink, alive, make_tarball, wait_exited

ALICE = TaskUser(user_id=3, username="alice")
LINKED = TaskUser(user_id=4, username="bob", uid=1500, gid=1501, unix_user="bob", unix_group="lab")


def spec_for(user: TaskUser | None) -> StartSpec:
    base = {"allocation_id": "x", "trial_id": 1, "experiment_id": 2, "entrypoint": "true"}
    return replace(StartSpec.parse(base), user=user)


# -- whom a task runs as ---------------------------------------------------------------------


def test_an_isolating_agent_runs_users_as_linked_or_derived_identities() -> None:
    iso = Isolation(Mode.ISOLATED, agent_uid=0, agent_gid=0)
    assert iso.plan(spec_for(ALICE)) == TaskIdentity(
        DERIVED_UID_BASE + 3, DERIVED_UID_BASE + 3, None, None
    )
    ident = iso.plan(spec_for(LINKED))
    assert ident is not None and (ident.uid, ident.gid, ident.name) == (1500, 1501, "bob")
    with pytest.raises(IdentityRefused, match="did not say whose task"):
        iso.plan(spec_for(None))
    root = TaskUser(user_id=5, username="carol", uid=0, gid=0, unix_user="root", unix_group="root")
    with pytest.raises(IdentityRefused, match="could act as the agent"):
        iso.plan(spec_for(root))
    other_base = Isolation(Mode.ISOLATED, 0, 0, derived_base=70_000)
    assert other_base.plan(spec_for(ALICE)) == TaskIdentity(70_003, 70_003, None, None)


def test_an_unprivileged_agent_runs_only_its_own_users_tasks() -> None:
    iso = Isolation(Mode.OWN_USER, agent_uid=1500, agent_gid=1500)
    assert iso.plan(spec_for(LINKED)) is None, "bob is linked to the agent's uid: as the agent"
    with pytest.raises(IdentityRefused, match="alice is linked to no Unix user"):
        iso.plan(spec_for(ALICE))
    assert "NOT isolated" in iso.describe() and "--shared-unisolated" in iso.describe()
    shared = Isolation(Mode.SHARED, agent_uid=1500, agent_gid=1500)
    assert shared.plan(spec_for(ALICE)) is None and shared.plan(spec_for(None)) is None
    assert "NOT isolated" in shared.describe()


def test_root_detects_that_it_can_isolate() -> None:
    assert os.geteuid() == 0, "the test suite runs as root, as det-agent does by default"
    assert Isolation.detect(shared=False).mode == Mode.ISOLATED
    assert Isolation.detect(shared=True).mode == Mode.SHARED


# -- the environment -------------------------------------------------------------------------


def test_one_env_builder_for_both_runtimes() -> None:
    spec = StartSpec.parse(
        {
            "allocation_id": "a",
            "trial_id": 1,
            "experiment_id": 2,
            "entrypoint": "x",
            "slot_indexes": [1],
            "env": {"DET_TRIAL_ID": "1", "DET_AGENT_TOKEN": "leak"},
            "environment": {"environment_variables": ["DET_AGENT_CREDENTIAL=leak", "A=1"]},
        }
    )
    slots = [{"index": 0, "type": "gpu"}, {"index": 1, "type": "gpu"}]
    host = task_env(
        spec,
        slots=slots,
        master_url="http://m",
        agent_id="ag",
        layout=EnvLayout(
            inherited={"DET_AGENT_TOKEN": "t", "HOME": "/root", "USER": "root", "PATH": "/bin"},
            code_dirs=("/h", "/w"),
            path_first=("/py",),
            home="/w",
        ),
    )
    assert "DET_AGENT_TOKEN" not in host and "DET_AGENT_CREDENTIAL" not in host
    assert host["CUDA_VISIBLE_DEVICES"] == "1" and host["A"] == "1"
    assert host["HOME"] == "/w" and "USER" not in host, "not the agent's home or name"
    assert host["PATH"] == "/py:/bin" and host["PYTHONPATH"] == "/h:/w"
    box = task_env(
        spec,
        slots=slots,
        master_url="http://m",
        agent_id="ag",
        layout=EnvLayout(code_dirs=("/lib",), default_pythonpath="/img", renumber_gpus=True),
    )
    assert box["CUDA_VISIBLE_DEVICES"] == "0" and box["PYTHONPATH"] == "/lib:/img"
    assert "HOME" not in box and "PATH" not in box


# -- directories and files -------------------------------------------------------------------


def test_task_dirs_are_private_and_handed_over(tmp_path: Path) -> None:
    d = tmp_path / "alloc"
    make_task_dir(d)
    (d / "sub").mkdir()
    (d / "sub" / "f").write_text("x")
    ident = TaskIdentity(DERIVED_UID_BASE + 9, DERIVED_UID_BASE + 9, None, None)
    hand_over(d, ident)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert {p.stat().st_uid for p in [d, *d.rglob("*")]} == {DERIVED_UID_BASE + 9}


def test_checkpoint_dirs_let_every_identity_write_and_none_list(tmp_path: Path) -> None:
    ident = TaskIdentity(DERIVED_UID_BASE + 9, DERIVED_UID_BASE + 9, None, None)
    new = tmp_path / "new"
    prepare_checkpoint_dir({"type": "shared_fs", "host_path": str(new)}, ident)
    assert stat.S_IMODE(new.stat().st_mode) == 0o1733
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    prepare_checkpoint_dir({"type": "shared_fs", "host_path": str(mine)}, ident)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o1733
    left = tmp_path / "theirs"
    left.mkdir()
    os.chown(left, 1234, 1234)
    prepare_checkpoint_dir({"type": "shared_fs", "host_path": str(left)}, ident)
    assert stat.S_IMODE(left.stat().st_mode) == 0o755, "an operator's directory is theirs"
    prepare_checkpoint_dir({"type": "s3", "bucket": "b"}, ident)  # nothing to do


def test_the_credential_file_is_the_agents_alone(tmp_path: Path) -> None:
    path = credential_path(tmp_path / "data", "agent/1")
    assert path.name == "agent-agent_1.credential"
    assert read_credential(path) is None
    save_credential(path, "detagent-abc")
    assert read_credential(path) == "detagent-abc"
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()


class Downloads:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.count = 0

    def download_model_def(self, url: str) -> bytes:
        self.count += 1
        return self.data


def test_the_cache_is_verified_on_every_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = b"model definition bytes"
    sha = hashlib.sha256(data).hexdigest()
    client = Downloads(data)
    cache = ModelDefCache(tmp_path / "cache", client)
    spec = StartSpec.parse(
        {
            "allocation_id": "a",
            "trial_id": 1,
            "experiment_id": 2,
            "entrypoint": "x",
            "model_def_url": "/api/v1/experiments/2/model_def",
            "model_def_sha256": sha,
        }
    )
    path = cache.fetch(spec)
    assert path is not None and path.read_bytes() == data and client.count == 1
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert cache.fetch(spec) == path and client.count == 1, "a good copy is reused"
    path.write_bytes(b"bob's code")  # what a trial sharing the agent's identity could do
    assert cache.fetch(spec) == path and path.read_bytes() == data and client.count == 2
    assert "does not match its sha256" in caplog.text
    nosha = StartSpec.parse({**json.loads(json.dumps(spec.to_json())), "model_def_sha256": None})
    cache.fetch(nosha)
    cache.fetch(nosha)
    assert client.count == 4, "what cannot be verified is never reused"


def test_a_container_work_dir_tar_is_owned_by_the_task(tmp_path: Path) -> None:
    model = make_tarball(tmp_path / "m.tar.gz", {"train.py": "print(1)", "d/x.txt": "x"})
    out = owned_workdir_tar(model.read_bytes(), 1500, 1501)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        members = {m.name: m for m in tar}
        # rooted at the work dir's parent: the work dir is an entry of its own, so extracting
        # it sets the owner and mode of the directory Docker created (a "." entry would not)
        assert set(members) == {"workdir", "workdir/train.py", "workdir/d/x.txt"}
        assert members["workdir"].isdir() and members["workdir"].mode == 0o700
        assert {(m.uid, m.gid) for m in members.values()} == {(1500, 1501)}
        f = tar.extractfile(members["workdir/train.py"])
        assert f is not None and f.read() == b"print(1)"
    with tarfile.open(fileobj=io.BytesIO(owned_workdir_tar(None, 7, 8))) as tar:
        assert [(m.name, m.uid) for m in tar] == [("workdir", 7)]


# -- real processes --------------------------------------------------------------------------


WHOAMI = (
    "import os, sys, time\n"
    "ids = [os.getuid(), os.getgid(), os.getgroups(), oct(os.umask(0))]\n"
    "print('ID', *ids, os.environ['HOME'], os.getcwd(), flush=True)\n"
    "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
    "foreign = [p for p in pids if os.stat('/proc/' + p).st_uid != os.getuid()]\n"
    "print('PROCS', len(pids), len(foreign), os.path.exists('/proc/1/cmdline'), flush=True)\n"
    "if sys.argv[1:] == ['wait']:\n"
    "    time.sleep(60)\n"
)


@pytest.mark.parametrize("hide", [False, True], ids=["host-proc", "own-proc"])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_trials_run_as_their_identity_warm_and_cold(tmp_path: Path, warm: bool, hide: bool) -> None:
    from tests.cluster import cluster_dir, release_cluster_dir

    work = cluster_dir(tmp_path, "agent")
    try:
        sink = Sink()
        ctx = RuntimeContext(
            work_dir=work / "work",
            master_url="http://m:1",
            agent_id="iso",
            slots=[{"index": 0, "type": "cpu"}],
            log_sink=sink,
            warm_start=warm,
            isolation=Isolation(Mode.ISOLATED, 0, 0, hide_processes=hide),
        )
        (work / "work").mkdir(mode=0o711)
        rt = ProcessRuntime(ctx)
        try:
            tarball = make_tarball(tmp_path / "m.tar.gz", {"whoami.py": WHOAMI})
            spec = StartSpec.parse(
                {
                    "allocation_id": "w",
                    "trial_id": 1,
                    "experiment_id": 2,
                    "entrypoint": "python3 whoami.py",
                    "slot_indexes": [0],
                }
            )
            # A user of its own: hidepid=2 shows every process of the trial's uid, so another
            # test's trial of the same user (this test's other variants run beside it on other
            # workers) would be counted here (run 40: "PROCS 2 0").
            user = TaskUser(user_id=7000 + 2 * warm + hide, username="alice")
            rt.start(replace(spec, user=user), tarball)
            st = wait_exited(rt, "w")
            assert st["exit_code"] == 0, sink.of("w")
            uid = DERIVED_UID_BASE + user.user_id
            line = next(ln for ln in sink.of("w", "stdout") if ln.startswith("ID "))
            assert line.split()[1:5] == [str(uid), str(uid), "[]", "0o77"], line
            assert line.split()[5] == line.split()[6] == str(work / "work" / "w")
            procs = next(ln for ln in sink.of("w", "stdout") if ln.startswith("PROCS ")).split()
            if hide:  # its own process alone: not the agent, not pid 1, nobody else's
                assert procs[1:] == ["1", "0", "False"], procs
            else:
                assert int(procs[2]) > 0 and procs[3] == "True", procs
            # The agent's /proc is the host's still (the trial's mount stayed its own).
            assert os.path.exists("/proc/1/cmdline")
            assert len([p for p in os.listdir("/proc") if p.isdigit()]) > 1

            # A trial that hides processes still gets its signals and reports its exit code.
            rt.start(
                replace(spec, allocation_id="k", entrypoint="python3 whoami.py wait", user=user),
                tarball,
            )
            sink.wait_for("k", "PROCS ")
            rt.kill("k")
            st = wait_exited(rt, "k")
            assert st["exit_code"] == -15, (st, sink.of("k"))
        finally:
            rt.shutdown(timeout=5)
    finally:
        release_cluster_dir(tmp_path, "agent")


ORPHAN = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from pathlib import Path
    from agent.identity import Isolation, Mode
    from agent.runtime import RuntimeContext
    from agent.runtime.process import ProcessRuntime
    from detlab.protocol import StartSpec

    lines = []
    ctx = RuntimeContext(work_dir=Path(sys.argv[1]), master_url="http://m:1", agent_id="x",
                         slots=[{"index": 0, "type": "cpu"}], log_sink=lambda *a: lines.append(a),
                         warm_start=sys.argv[2] == "warm",
                         isolation=Isolation(Mode.ISOLATED, 0, 0,
                                             hide_processes=sys.argv[3] == "1"))
    rt = ProcessRuntime(ctx)
    spec = StartSpec.parse({"allocation_id": "o", "trial_id": 1, "experiment_id": 1,
        "entrypoint": ["python3", "-c", "import time; print('up', flush=True); time.sleep(60)"],
        "user": {"user_id": 8, "username": "u"}})
    t = threading.Thread(target=rt.start, args=(spec, None))
    t.start(); t.join()
    while not lines:
        time.sleep(0.01)
    print(rt.states()[0].pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("hide", [False, True], ids=["host-proc", "own-proc"])
@pytest.mark.parametrize("how", ["warm", "cold"])
def test_trials_of_other_identities_still_die_with_a_killed_agent(
    tmp_path: Path, how: str, hide: bool
) -> None:
    """Changing identity clears the parent-death signal: it must be set after the change."""
    from tests.cluster import cluster_dir, release_cluster_dir

    work = cluster_dir(tmp_path, "agent")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", ORPHAN, str(work), how, "1" if hide else "0"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert proc.returncode == -9, proc.stderr
        pid = int(proc.stdout.split()[0])
        # Ran as the other identity, unless it is already gone (the point of the test: it may
        # die before this line; reading /proc first then raised FileNotFoundError).
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except FileNotFoundError:
            uid = None
        assert uid in (None, DERIVED_UID_BASE + 8) or not alive(pid), uid
        end = time.monotonic() + 30
        while alive(pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not alive(pid), "the trial outlived its agent"
    finally:
        release_cluster_dir(tmp_path, "agent")
