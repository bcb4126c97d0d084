"""The fake API server's kubelet: runs a bound pod's container command as a local process and
keeps its output as timestamped lines (a mixin of FakeCluster, whose store and lock it uses)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.k8s.fake_objects import NotFound, now
from tests.k8s.fake_secrets import MissingSecret


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes]
    # (RFC 3339 timestamp, line) as the kubelet keeps a container's output.
    lines: list[tuple[str, bytes]] = field(default_factory=list)
    pumped: threading.Event = field(default_factory=threading.Event)
    killed: bool = False


class Kubelet:
    """Pods -> processes. Expects cond, procs, objects, run_processes, _record, _key,
    _pod_key and _finish_pod from FakeCluster."""

    cond: Any
    procs: dict[str, _Proc]
    objects: dict[tuple[str, str, str], dict[str, Any]]
    run_processes: bool
    secret_value: Any
    emit_event: Any

    def _waiting(self, pod: dict[str, Any], reason: str, message: str, event: str = "") -> None:
        """The container cannot start (yet): the pod stays Pending with this waiting reason, and
        a Warning event says why (`event`, or the message)."""
        c = pod["spec"]["containers"][0]
        pod["status"]["containerStatuses"] = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ]
        self._record("MODIFIED", pod)
        self.emit_event(pod, "Warning", "Failed", event or message, "kubelet")

    def _start(self, pod: dict[str, Any]) -> None:
        c = pod["spec"]["containers"][0]
        if str(c.get("image", "")).startswith("unpullable"):  # a registry that refuses it
            msg = (
                f'Failed to pull image "{c["image"]}": pull access denied for {c["image"]}, '
                "repository does not exist or may require 'docker login'"
            )
            self._waiting(pod, "ErrImagePull", msg)
            return
        try:
            env = self._container_env(pod, c)
        except MissingSecret as e:  # the kubelet retries when the Secret comes (fake_secrets)
            self._waiting(pod, "CreateContainerConfigError", str(e), f"Error: {e}")
            return
        if not self.run_processes:
            pod["status"].update(phase="Running", podIP="127.0.0.1", startTime=now())
            self._record("MODIFIED", pod)
            return
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        if not argv:  # the fake has no image whose entrypoint would run instead
            self._finish_pod(pod, 128, reason="StartError", message="no command (no image here)")
            return
        try:
            popen = subprocess.Popen(
                argv,
                env=env,
                cwd=c.get("workingDir") or None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            self._finish_pod(pod, 128, reason="StartError", message=str(e))
            return
        proc = _Proc(popen)
        self.procs[self._pod_key(pod)] = proc
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()
        pod["status"].update(
            phase="Running",
            podIP="127.0.0.1",
            hostIP="127.0.0.1",
            startTime=now(),
            containerStatuses=[
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now()}},
                }
            ],
        )
        self._record("MODIFIED", pod)
        self.emit_event(pod, "Normal", "Started", f"Started container {c['name']}", "kubelet")
        threading.Thread(
            target=self._reap,
            args=(pod["metadata"]["namespace"], pod["metadata"]["name"], popen),
            daemon=True,
        ).start()

    def _container_env(self, pod: dict[str, Any], c: dict[str, Any]) -> dict[str, str]:
        env = {
            # The "image" is this machine's Python with detlab importable (PYTHONPATH).
            "PATH": os.environ.get("PATH", os.defpath),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "HOSTNAME": pod["metadata"]["name"],
        }
        for e in c.get("env") or []:
            src = e.get("valueFrom") or {}
            ref = (src.get("fieldRef") or {}).get("fieldPath")
            if ref == "metadata.name":
                env[e["name"]] = pod["metadata"]["name"]
            elif ref == "spec.nodeName":
                env[e["name"]] = pod["spec"]["nodeName"]
            elif ref == "status.podIP":
                env[e["name"]] = "127.0.0.1"
            elif "secretKeyRef" in src:
                value = self.secret_value(pod["metadata"]["namespace"], src["secretKeyRef"])
                if value is not None:
                    env[e["name"]] = value
            else:
                env[e["name"]] = str(e.get("value", ""))
        return env

    def _pump(self, proc: _Proc) -> None:
        assert proc.popen.stdout is not None
        for raw in iter(proc.popen.stdout.readline, b""):
            ts = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            with self.cond:
                proc.lines.append((ts, raw.rstrip(b"\n")))
                self.cond.notify_all()
        proc.popen.stdout.close()
        with self.cond:
            proc.pumped.set()
            self.cond.notify_all()

    def _reap(self, ns: str, name: str, popen: subprocess.Popen[bytes]) -> None:
        code = popen.wait()
        proc = self.procs.get(f"{ns}/{name}")
        if proc is not None:
            proc.pumped.wait(10)  # the kubelet has the whole output before the pod ends
        with self.cond:
            pod = self.objects.get(self._key("Pod", ns, name))
            if pod is None or pod["status"]["phase"] not in ("Pending", "Running"):
                return
            self._finish_pod(pod, code if code >= 0 else 128 - code)
            if pod["metadata"].get("deletionTimestamp"):
                self._remove(pod)

    def pod_log(
        self, ns: str, name: str, start: int = 0, since: str | None = None
    ) -> tuple[list[tuple[str, bytes]], bool]:
        """The pod's output lines from index `start` (after timestamp `since`), and whether
        there will be no more (its process ended and its output was read)."""
        with self.cond:
            pod = self.objects.get(self._key("Pod", ns, name))
            if pod is None:
                raise NotFound(f'pods "{name}" not found')
            proc = self.procs.get(self._pod_key(pod))
            if proc is None:
                return [], pod["status"]["phase"] not in ("Pending",)
            lines = [x for x in proc.lines[start:] if since is None or x[0] >= since]
            return lines, proc.pumped.is_set()

    def pod_running(self, ns: str, name: str) -> bool:
        with self.cond:
            proc = self.procs.get(f"{ns}/{name}")
            return proc is not None and proc.popen.poll() is None

    # -- jobs --


def _later(delay: float, fn: Any, *args: Any) -> None:
    """Run fn(*args) after delay on a daemon timer (the test process never waits for it)."""
    t = threading.Timer(delay, fn, args=args)
    t.daemon = True
    t.start()


def _killpg(popen: subprocess.Popen[bytes], sig: int) -> None:
    if popen.poll() is not None:
        return
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
