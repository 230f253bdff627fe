"""`gang-scheduler snapshot` against the real API server (#26 part 4): the file read back
gives the core the same decision as a fresh LIST does, anonymised too (renamed)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.fixtures import Cluster
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.shell import snapshotting
from scheduler.shell.api import load_credentials
from scheduler.sim.anonymising import anonymise

pytestmark = pytest.mark.cluster

SCHEDULER = "nobody-snapshotted"  # nobody runs it: the gang stays pending for the test
CONFIG = Config(scheduler_name=SCHEDULER, default_timeout_seconds=1e9)


def bind_map(document: dict) -> dict[tuple[str, str], str]:
    cache = snapshotting.fold(document, config=CONFIG)
    result = schedule(cache.snapshot(whole=True), now=time.time(), config=CONFIG)
    return {
        (b.pod.namespace, b.pod.name): b.node
        for group in result.bindings
        for gang in group.gangs
        for b in gang.bindings
    }


def test_a_snapshot_file_gives_the_decision_a_fresh_list_gives(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.nodes(2, gpu=8)
    annotations = {names.KOORD_NAME: "snap", names.KOORD_MIN_AVAILABLE: "2"}
    cluster.gang(
        "snap", 2, scheduler=SCHEDULER, annotations=annotations,
        requests={"nvidia.com/gpu": "8"},
    )  # fmt: skip
    path = tmp_path / "cluster.json"
    result = subprocess.run(
        [sys.executable, "-m", "scheduler", "snapshot", "-o", str(path),
         "--kubeconfig", str(cluster.access.kubeconfig)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = snapshotting.read(path)
    assert document["kind"] == "ClusterSnapshot"
    mine = {
        (pod["metadata"]["namespace"], pod["metadata"]["name"])
        for pod in document["lists"]["pods"]
        if pod["metadata"]["namespace"] == cluster.namespace
    }
    assert mine == {(cluster.namespace, "snap-0"), (cluster.namespace, "snap-1")}
    from_file = bind_map(document)
    # This test's gang is placed on this test's two nodes (its pods select them).
    ours = {k: v for k, v in from_file.items() if k[0] == cluster.namespace}
    assert set(ours) == mine
    assert sorted(ours.values()) == sorted(cluster.node_names())
    # A fresh LIST, straight from the API server, decides the same.
    live = asyncio.run(snapshotting.take(load_credentials(str(cluster.access.kubeconfig))))
    assert bind_map(live) == from_file
    # Anonymised: the same decision, renamed; no name of this test's left in the file.
    hidden, mapping = anonymise(json.loads(path.read_text()))
    renamed = {
        (mapping[ns], mapping[name]): mapping[node] for (ns, name), node in from_file.items()
    }
    assert bind_map(hidden) == renamed
    text = json.dumps(hidden)
    assert cluster.namespace not in text
    assert not any(node in text for node in cluster.node_names())
