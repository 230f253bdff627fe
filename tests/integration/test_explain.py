"""`gang-scheduler explain` on an unplaceable gang, against the real API server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.fixtures import Cluster
from scheduler.model import names

pytestmark = pytest.mark.cluster


def _explain(
    cluster: Cluster, *args: str, command: str = "explain"
) -> subprocess.CompletedProcess[str]:
    """`gang-scheduler explain ARGS` (or another command) against the cluster, as a user
    runs it."""
    argv = [sys.executable, "-m", "scheduler", command, *args]
    return subprocess.run(
        [*argv, "--kubeconfig", str(cluster.access.kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_explain_says_why_a_gang_cannot_be_placed(cluster: Cluster) -> None:
    cluster.nodes(2, gpu=8)
    annotations = {names.KOORD_NAME: "huge", names.KOORD_MIN_AVAILABLE: "3"}
    cluster.gang(
        "huge", 3, scheduler="nobody-explained", annotations=annotations,
        requests={"nvidia.com/gpu": "8"},
    )  # fmt: skip
    result = _explain(cluster, f"{cluster.namespace}/huge", "--scheduler-name", "nobody-explained")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"gang {cluster.namespace}/huge: min 3 of 3, Strict")
    (need,) = [line for line in lines if line.startswith("needs ")]
    # Other tests' nodes may exist too; this test's pods select only its own two.
    assert need.startswith("needs 3×{nvidia.com/gpu: 8}: 2 of ")  # noqa: RUF001
    assert "room for 2 in all" in need
    assert "does not fit, nothing was bound" in lines[-1]
    assert "Insufficient nvidia.com/gpu" in lines[-1]
    # With --forecast, a last line more: no expected start, and why.
    timed = _explain(
        cluster, f"{cluster.namespace}/huge", "--forecast", "--scheduler-name", "nobody-explained"
    )
    # (how it is said depends on the other tests' nodes: too few GPUs in all, or on its own)
    assert timed.stdout.splitlines()[-1].startswith("no expected start (never-fits): ")


def test_explain_of_an_unknown_gang_says_so(cluster: Cluster) -> None:
    result = _explain(cluster, f"{cluster.namespace}/nothing")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"no gang {cluster.namespace}/nothing: no PodGroup and no pod of gang-scheduler names it"
    )


def test_explain_cluster_says_what_free_room_is_stranded(cluster: Cluster) -> None:
    """A gang of 8-GPU members waits (for a scheduler nobody runs): the whole 8-GPU nodes
    could take it, so nothing of theirs is stranded; the counts come from the real cluster
    (other tests' nodes may be there too, so only what this test makes is asserted)."""
    cluster.nodes(2, gpu=8)
    annotations = {names.KOORD_NAME: "wide", names.KOORD_MIN_AVAILABLE: "2"}
    cluster.gang(
        "wide", 2, scheduler="nobody-fragmented", annotations=annotations,
        requests={"nvidia.com/gpu": "8"},
    )  # fmt: skip
    result = _explain(cluster, "--cluster", "--scheduler-name", "nobody-fragmented")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("cluster: ")
    assert any(line.startswith("whole GPU nodes free: ") for line in lines), lines
    assert any(line.startswith("2 members wait; the smallest asks for {") for line in lines)
    assert any("nvidia.com/gpu: 8" in line for line in lines if "smallest" in line), lines
    (fit,) = [line for line in lines if line.endswith("of that shape fit now, node by node")]
    assert int(fit.split()[0]) >= 2


def test_top_lists_a_waiting_gang_with_its_queue_and_why(cluster: Cluster) -> None:
    cluster.nodes(1, gpu=8)
    annotations = {names.KOORD_NAME: "tall", names.KOORD_MIN_AVAILABLE: "2"}
    cluster.gang(
        "tall", 2, scheduler="nobody-topped", annotations=annotations,
        requests={"nvidia.com/gpu": "16"},
    )  # fmt: skip
    result = _explain(cluster, "--scheduler-name", "nobody-topped", command="top")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "GANG", "QUEUE", "WAITING", "AGE", "REASON"]
    (row,) = [line for line in lines if line.startswith(f"{cluster.namespace} ")]
    assert row.split()[1:4] == ["tall", "default", "2/2"]
    assert "Insufficient nvidia.com/gpu" in row
    timed = _explain(
        cluster, "--forecast", "--scheduler-name", "nobody-topped", command="top"
    ).stdout.splitlines()
    assert timed[0].split() == ["NAMESPACE", "GANG", "QUEUE", "WAITING", "AGE", "ETA", "REASON"]
    (row,) = [line for line in timed if line.startswith(f"{cluster.namespace} ")]
    assert row.split()[5:7] == ["?", "never-fits"], row


def test_the_cli_is_a_kubectl_plugin(cluster: Cluster) -> None:
    """`kubectl gang ...` runs the executable kubectl-gang on the PATH (`make setup`
    installs it in the venv, beside gang-scheduler), with the words after `gang`."""
    plugin = Path(sys.executable).parent / "kubectl-gang"
    assert plugin.exists(), f"{plugin} is missing: run `make setup` (pip install -e .)"
    env = {**os.environ, "PATH": f"{plugin.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(cluster.access.kubectl_path), "gang", "top", "--scheduler-name", "nobody-at-all",
         "--kubeconfig", str(cluster.access.kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no gang is waiting"
    usage = subprocess.run(
        [str(cluster.access.kubectl_path), "gang", "--help"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert usage.stdout.startswith("usage: kubectl gang"), usage.stdout
