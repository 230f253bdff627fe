"""pytest fixtures that give tests a real control plane.

By default the session starts its own control plane in ``.cluster-test/`` (separate from the
``make demo`` one in ``.cluster/``) and stops it when the session ends, pass or fail. With
``E2E_USE_EXISTING_CLUSTER=1`` the tests use whatever cluster ``KUBECONFIG`` names instead
(a kind cluster, say), and leave it running.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pykube
import pytest

from e2e import cluster

TEST_CLUSTER_DIR = cluster.REPO / ".cluster-test"


@dataclass(frozen=True)
class ClusterAccess:
    """What a test needs to talk to the cluster: a kubeconfig and a kubectl."""

    kubeconfig: Path
    kubectl_path: Path

    def kubectl(
        self, *args: str, timeout: float = 60, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def api(self) -> pykube.HTTPClient:
        return pykube.HTTPClient(pykube.KubeConfig.from_file(str(self.kubeconfig)))


def wait_for(
    condition: Callable[[], object], *, timeout: float, what: str, interval: float = 0.2
) -> object:
    """Poll ``condition`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _existing_cluster() -> ClusterAccess:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        raise pytest.UsageError(
            "E2E_USE_EXISTING_CLUSTER=1 needs KUBECONFIG to name the cluster's kubeconfig"
        )
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    kubectl_path = Path(found) if found else cluster.resolve_binaries().kubectl
    access = ClusterAccess(kubeconfig=Path(kubeconfig), kubectl_path=kubectl_path)
    access.kubectl("apply", "-f", str(cluster.CRDS))
    access.kubectl(
        "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90
    )
    return access


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ClusterAccess]:
    if os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1":
        yield _existing_cluster()
        return
    try:
        plane = cluster.up(TEST_CLUSTER_DIR)
    except cluster.AlreadyRunning:
        # Left behind by a session that was killed: start clean rather than inherit its state.
        cluster.down(TEST_CLUSTER_DIR)
        plane = cluster.up(TEST_CLUSTER_DIR)
    except cluster.ClusterError as error:
        pytest.fail(f"the local control plane did not start: {error}", pytrace=False)
    try:
        yield ClusterAccess(kubeconfig=plane.kubeconfig, kubectl_path=plane.kubectl)
    finally:
        cluster.down(TEST_CLUSTER_DIR)


@pytest.fixture
def namespace(control_plane: ClusterAccess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test; its pods are deleted afterwards.

    The local control plane runs no controller-manager, so deleting a namespace does not
    delete what is in it: the pods (which hold node capacity) are deleted explicitly first.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{uuid.uuid4().hex[:5]}"
    control_plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        control_plane.kubectl(
            "delete", "pods,podgroups,configmaps", "--all", "-n", name, "--wait=false", check=False
        )
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
