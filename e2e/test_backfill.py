"""Starvation-free backfill (issue #12) on the real API server: a big gang created into a
stream of small gangs that keeps the nodes nearly full is bound within its bound, while the
small gangs keep the cluster busy before it becomes the head. The scenario is the one
``python -m bench.backfill`` measures (``bench/backfill.py``), at a small size."""

from __future__ import annotations

import asyncio

import pytest

from bench.backfill import Placement, starvation
from e2e.fixtures import TEST_LABEL, Cluster, PrivateSchedulers
from scheduler.shell.api import ApiClient, load_credentials

pytestmark = pytest.mark.cluster

STARVATION_AFTER = 5.0
LIFETIME = 3.0  # seconds a small gang runs once bound


async def _run(cluster: Cluster, scheduler: str) -> dict:
    api = ApiClient(load_credentials(str(cluster.access.kubeconfig)), connections=16)
    try:
        return await starvation(
            api,
            namespace=cluster.namespace,
            where=Placement(scheduler, {TEST_LABEL: cluster.namespace}),
            capacity_cpu=16.0,
            big_size=16,
            lifetime=LIFETIME,
            warmup=LIFETIME,
            window=40.0,
            starvation_after=STARVATION_AFTER,
        )
    finally:
        await api.close()


def test_a_big_gang_in_a_stream_of_small_ones_binds_within_its_bound(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(2, cpu="8")
    scheduler = private_scheduler.start("--starvation-after", str(STARVATION_AFTER))
    result = asyncio.run(_run(cluster, scheduler.name))
    print(result)
    assert result["utilisation_before_head"] >= 0.6, (
        "the stream of small gangs kept the nodes busy before the big gang's head hold",
        result,
    )
    assert result["big_gang_bound"], result
    # Held from --starvation-after on, its room is free once the small gangs on it finish.
    bound = STARVATION_AFTER + LIFETIME + 15
    assert result["big_gang_wait_seconds"] <= bound, result
    assert result["small_gangs_half_bound"] == [], result
    assert cluster.events("StarvationHold")
    scheduler.assert_alive()
