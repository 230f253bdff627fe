"""/metrics after a scheduled gang: the counters and histograms moved."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.fixtures import Cluster, PrivateSchedulers, wait_for
from scheduler.model import names

pytestmark = pytest.mark.cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_metrics_move_when_a_gang_is_scheduled(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    port = _free_port()
    scheduler = private_scheduler.start("--metrics-port", str(port))
    cluster.nodes(1, gpu=8)
    gang = {names.KOORD_NAME: "m", names.KOORD_MIN_AVAILABLE: "4"}
    members = cluster.gang(
        "m", 4, scheduler=private_scheduler.name, annotations=gang, requests={"nvidia.com/gpu": "2"}
    )
    wait_for(lambda: members <= cluster.bound(), timeout=30, what="gang bound")

    def settled() -> dict[str, float] | None:
        samples = _scrape(port)
        done = samples.get("gang_scheduler_gang_complete_to_bound_seconds_count", 0) >= 1
        return samples if done else None

    samples = wait_for(settled, timeout=15, what="the gang's bind latency observed")
    assert samples["gang_scheduler_gang_attempts_total{result=scheduled}"] >= 1
    assert samples["gang_scheduler_bind_duration_seconds_count"] >= 4
    assert samples["gang_scheduler_bind_errors_total"] == 0
    assert samples["gang_scheduler_pass_duration_seconds_count"] >= 1
    assert samples["gang_scheduler_queue_depth"] == 0
    assert samples["gang_scheduler_pending_gangs"] == 0
    scheduler.assert_alive()
