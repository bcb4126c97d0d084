"""deploy/k8s/: the master's manifests pass `kubectl apply --dry-run=client` (against the fake
API server, which serves the discovery kubectl needs), carry a master.yaml this master accepts,
and give the master's service account write access in its namespace only."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from master.config import load_master_config
from tests.cluster import ROOT
from tests.k8s.fake_apiserver import FakeApiServer

DEPLOY = ROOT / "deploy" / "k8s"


def _docs() -> list[dict[str, Any]]:
    return [
        d for f in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d
    ]


def test_kubectl_client_dry_run_accepts_every_manifest(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is on this machine (the tests need it)"
    # No token: kubectl sends no bearer token over plain HTTP, and apply reads each object's
    # current state (a Secret's too, now that the fake serves them) before its dry run.
    with FakeApiServer(token=None) as srv:
        kc = srv.kubeconfig(tmp_path / "kubeconfig")
        out = subprocess.run(
            [kubectl, "--kubeconfig", str(kc), "apply", "--dry-run=client", "-f", str(DEPLOY)]
            + ["--validate=false"],  # the fake serves no OpenAPI schema
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 0, out.stderr
    created = out.stdout.splitlines()
    assert len(created) == len(_docs()) and all(ln.endswith("(dry run)") for ln in created)
    assert "deployment.apps/detlab-master created (dry run)" in created


def test_the_config_map_holds_a_master_config_this_master_accepts(tmp_path: Path) -> None:
    (cm,) = [d for d in _docs() if d["kind"] == "ConfigMap"]
    path = tmp_path / "master.yaml"
    path.write_text(cm["data"]["master.yaml"])
    cfg = load_master_config(path)
    (rm,) = cfg.resource_managers
    assert rm.type == "kubernetes" and rm.kubernetes is not None
    assert rm.kubernetes.namespace == "detlab"


def test_rbac_writes_only_in_the_namespace() -> None:
    docs = _docs()
    cluster_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert cluster_rules and all(set(r["verbs"]) <= {"get", "list", "watch"} for r in cluster_rules)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "detlab"
    writes = {res for r in role["rules"] for res in r["resources"] if "create" in r["verbs"]}
    assert writes == {"jobs", "secrets"}  # secrets: each allocation's session token
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "detlab-master"
