"""The lifecycle of the local control plane itself: versions, a second ``up``, ``down``.

These need the control plane this project builds, so they are marked ``local_control_plane``
and deselected (-m "not local_control_plane") when the suite runs against another cluster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from e2e.fixtures import ClusterAccess
from testbed import cluster

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def _pinned_kubernetes() -> str:
    """The version of Kubernetes the default release's module pins (releases/default)."""
    releases = cluster.REPO / "e2e" / "controlplane" / "releases"
    default = (releases / "default").read_text().strip()
    go_mod = (releases / default / "go.mod").read_text().split()
    return go_mod[go_mod.index("k8s.io/kubernetes") + 1]


def test_kubectl_and_apiserver_report_the_pinned_kubernetes_version(
    control_plane: ClusterAccess,
) -> None:
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    pinned = _pinned_kubernetes()
    assert versions["clientVersion"]["gitVersion"] == pinned
    assert versions["serverVersion"]["gitVersion"] == pinned


def test_second_up_is_refused_and_down_stops_exactly_what_up_started(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    plane = cluster.up(directory)
    try:
        assert {p.name for p in plane.running()} == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kwok",
        }
        with pytest.raises(cluster.AlreadyRunning, match="already running"):
            cluster.up(directory)
    finally:
        stopped = cluster.down(directory)
    assert sorted(stopped) == ["etcd", "kube-apiserver", "kube-controller-manager", "kwok"]
    assert plane.running() == []
    for process in plane.processes:
        assert not Path(f"/proc/{process.pid}").exists() or not process.alive()
    assert sorted(p.name for p in directory.iterdir()) == ["logs"]
    assert os.listdir(directory / "logs")
