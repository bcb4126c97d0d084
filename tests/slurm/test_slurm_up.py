"""scripts/slurm/up after its Slurm died with jobs in it (a killed test run, a restarted machine).

Stop 53's CI ran on a machine whose previous test run had been killed mid-way: the two-node
Slurm's saved state still held that run's jobs, slurmctld brought them back as running on nodes
that no longer ran them, and every new job pended behind them until its test timed out. A cold
start (nothing of that Slurm runs, not even a job step) now clears the saved jobs; a warm one
(a slurmctld stopped while its slurmds go on) keeps them.
Each test here starts a Slurm of its own, under its own root and ports, and stops it after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ROOT, free_port, wait_for
from tests.xdist_groups import bindable

pytestmark = pytest.mark.integration

UP = ROOT / "scripts" / "slurm" / "up"
DOWN = ROOT / "scripts" / "slurm" / "down"


def _two_ports() -> int:
    """A port P, free now, with P + 1 free too (slurmctld on P, the one slurmd on P + 1)."""
    for _ in range(50):
        port = free_port()
        if bindable(port + 1):
            return port
    raise RuntimeError("no two free ports in a row")


class Slurm:
    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.env = {**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf")}

    def up(self) -> str:
        done = subprocess.run(
            ["bash", str(UP), str(self.root), "--port", str(self.port)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def run(self, *argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True, env=self.env).stdout

    def state(self, job: str) -> str:
        return self.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").strip()

    def saved(self, job: str) -> None:
        """Wait until slurmctld has saved `job` as it is now. It writes its state file a moment
        after a change: killed before that, it comes back with the job as it was (a running job
        as pending, which it then starts a second time and drains the node for). A comment
        set now is in the file only once a save taken after it (and so after the start) is."""
        marker = f"detlab-saved-{uuid.uuid4().hex[:12]}"
        self.run("scontrol", "update", f"JobId={job}", f"Comment={marker}")
        state = self.root / "state" / "job_state"
        wait_for(lambda: marker.encode() in state.read_bytes(), 30, what=f"job {job} to be saved")

    def jobs(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i").split()

    def submit(self, gpus: int, command: str) -> str:
        out = self.run(
            "sbatch", "--parsable", f"--gres=gpu:{gpus}", f"--chdir={self.root}", "--wrap", command
        )
        return out.strip().split(";")[0]

    def daemon_pids(self, *tags: str) -> list[int]:
        return [int((self.root / "run" / f"{t}.ours").read_text()) for t in tags]

    def processes(self, comm: str | None = None) -> list[int]:
        """The processes of this Slurm (its daemons, its job steps and their jobs: each carries
        its SLURM_CONF), or only those named `comm`; never this test's own."""
        mine = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                if comm is not None and (proc / "comm").read_text().strip() != comm:
                    continue
                if mine in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
        return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def gone() -> bool:
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                return False
        return True

    wait_for(gone, 30, what=f"processes {pids} to die")


@pytest.fixture
def own_slurm(slurm: Path) -> Iterator[Slurm]:
    """A one-node Slurm of this test's own (asks for `slurm` so that Slurm is installed)."""
    root = Path(f"/tmp/detlab-slurm-up-{os.getpid()}")
    s = Slurm(root, _two_ports())
    try:
        yield s
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], env=s.env, check=False)
        subprocess.run(["bash", str(DOWN), str(root)], check=False)
        _kill(s.processes())
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_a_slurm_that_died_with_its_jobs_comes_back_without_them(own_slurm: Slurm) -> None:
    s = own_slurm
    s.up()
    held = s.submit(2, "sleep 600")  # both fake GPUs of the node
    wait_for(lambda: s.state(held) == "RUNNING", 60, what=f"job {held} to run")
    # Everything dies at once, as at a session's end: the daemons, the job's step, the job.
    _kill(s.processes())
    out = s.up()
    assert s.jobs() == [], f"the dead Slurm's job came back: {out}"
    new = s.submit(2, "true")
    wait_for(lambda: s.state(new) == "COMPLETED", 60, what=f"job {new} to run and end")
    assert "a cold start" in out, out


def test_a_stopped_slurmctld_comes_back_with_its_jobs(own_slurm: Slurm) -> None:
    s = own_slurm
    s.up()
    job = s.submit(1, "sleep 600")
    wait_for(lambda: s.state(job) == "RUNNING", 60, what=f"job {job} to run")
    # Only slurmctld dies (its slurmd and the job go on): its saved jobs are real.
    s.saved(job)
    _kill(s.daemon_pids("slurmctld"))
    out = s.up()
    assert "cold start" not in out, out
    wait_for(lambda: s.state(job) == "RUNNING", 30, what=f"job {job} to be found again")
    # Even with no daemon left, a job step still running keeps the start warm.
    s.saved(job)
    _kill(s.daemon_pids("slurmctld", "slurmd"))
    assert s.processes("slurmstepd"), "the job's step died with slurmd"
    out = s.up()
    assert "cold start" not in out, out
    wait_for(lambda: s.state(job) == "RUNNING", 30, what=f"job {job} to be found again")


def test_down_leaves_alone_a_process_that_took_a_recorded_pid(tmp_path: Path) -> None:
    """After a restart a recorded pid may be another program's: down kills only the daemon it
    recorded (slurmctld, slurmd, munged) and drops the stale pid files."""
    bystander = subprocess.Popen(["tail", "-f", "/dev/null"])  # lives until killed
    try:
        (tmp_path / "run").mkdir()
        (tmp_path / "munge").mkdir()
        files = [tmp_path / "run" / n for n in ("slurmctld.ours", "slurmd.ours", "slurmd.n2.ours")]
        for f in [*files, tmp_path / "munge" / "munged.pid"]:
            f.write_text(f"{bystander.pid}\n")
        done = subprocess.run(["bash", str(DOWN), str(tmp_path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert bystander.poll() is None, "down killed a process that is none of its daemons"
        assert not any(f.exists() for f in files)
    finally:
        bystander.kill()
        bystander.wait()
