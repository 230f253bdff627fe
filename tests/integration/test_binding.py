"""The binder against a real API server: a rejected first bind leaves the gang unbound and
the cache as it was; after the gang is satisfied, a failure only sends that pod back."""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import replace

import pytest

from e2e.fixtures import Cluster
from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.objects import pod_from_dict
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, GangBinding, GroupBinding
from scheduler.model.pods import GangKey, PodRef
from scheduler.shell.api import ApiClient, load_credentials
from scheduler.shell.binding import Binder
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder

pytestmark = pytest.mark.cluster
GANG = GangKey("ns", "g")


def _load(cluster: Cluster, cache: ClusterCache, names: list[str]) -> list[PodRef]:
    items = json.loads(
        cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    )["items"]
    pods = {p["metadata"]["name"]: pod_from_dict(p) for p in items}
    for name in names:
        if name in pods:
            cache.upsert_pod(pods[name])
    return [
        pods[n].ref if n in pods else PodRef(cluster.namespace, n, "no-such-uid") for n in names
    ]


async def _apply(cluster: Cluster, cache: ClusterCache, gang_binding: GroupBinding) -> Metrics:
    api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
    metrics = Metrics.create()
    try:
        binder = Binder(
            api,
            cache,
            EventRecorder(api, component="test"),
            config=Config(),
            metrics=metrics,
        )
        binder.assume(gang_binding)
        await binder.apply(gang_binding)
        return metrics
    finally:
        await api.close()


def test_rejected_first_bind_binds_nothing_and_forgets_every_assumption(
    cluster: Cluster,
) -> None:
    (node,) = cluster.nodes(1)
    cluster.apply(*(cluster.pod(f"m-{i}", scheduler="nobody") for i in range(3)))
    cache = ClusterCache(scheduler_name="nobody")
    # The first member was deleted after the pass decided: its bind is rejected.
    refs = _load(cluster, cache, ["gone", "m-1", "m-2"])
    binding = GroupBinding((GangBinding(GANG, tuple(Binding(r, node) for r in refs)),))
    metrics = asyncio.run(_apply(cluster, cache, binding))
    assert metrics.registry.get_sample_value("gang_scheduler_bind_errors_total") == 1
    assert cluster.bound() == set()
    assert {p.node_name for p in cache.snapshot().pods} == {""}
    state = cache.memory[GANG]
    assert state.attempts == 1
    assert state.retry_at > 0
    assert "nothing of gang ns/g was bound" in state.last_message


def test_after_the_first_bind_a_failure_sends_back_only_that_pod(cluster: Cluster) -> None:
    (node,) = cluster.nodes(1)
    cluster.apply(*(cluster.pod(f"m-{i}", scheduler="nobody") for i in range(3)))
    cache = ClusterCache(scheduler_name="nobody")
    refs = _load(cluster, cache, ["m-0", "gone", "m-2"])
    binding = GroupBinding((GangBinding(GANG, tuple(Binding(r, node) for r in refs)),))
    asyncio.run(_apply(cluster, cache, binding))
    assert cluster.bound() == {"m-0", "m-2"}
    assumed = {p.ref.name: p.node_name for p in cache.snapshot().pods}
    assert assumed == {"m-0": node, "m-2": node}
    # The gang is satisfied: it is not retried whole (no attempt counted); the member that
    # failed is placed again after a short pause, not in a pass per failure.
    state = cache.memory[GANG]
    assert state.attempts == 0
    assert state.retry_at > 0


def test_events_wait_for_binds_in_flight_and_are_posted_after(cluster: Cluster) -> None:
    (node,) = cluster.nodes(1)
    cluster.apply(*(cluster.pod(f"m-{i}", scheduler="nobody") for i in range(2)))
    cache = ClusterCache(scheduler_name="nobody")
    refs = _load(cluster, cache, ["m-0", "m-1"])

    async def scenario() -> int:
        api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
        binder: Binder
        recorder = EventRecorder(api, component="test", busy=lambda: binder.in_flight > 0)
        binder = Binder(api, cache, recorder, config=Config(), metrics=Metrics.create())
        recording = asyncio.create_task(recorder.run())
        try:
            binding = GroupBinding((GangBinding(GANG, tuple(Binding(r, node) for r in refs)),))
            binder.assume(binding)
            await binder.apply(binding)
            assert binder.in_flight == 0
            await recorder.flush(timeout=10)
            return recorder.posted
        finally:
            recording.cancel()
            await asyncio.gather(recording, return_exceptions=True)
            await api.close()

    assert asyncio.run(scenario()) == 2
    assert len(cluster.events("Scheduled")) == 2


def test_bind_with_no_answer_and_no_api_server_to_ask_forgets_the_whole_group(
    cluster: Cluster,
) -> None:
    """Connection refused (an API server restarting): the bind may not be taken for done, and
    the check that it did not land cannot be made either, however long it is asked (the
    binder's patience): the group is forgotten whole."""
    (node,) = cluster.nodes(1)
    cluster.apply(*(cluster.pod(f"m-{i}", scheduler="nobody") for i in range(2)))
    cache = ClusterCache(scheduler_name="nobody")
    refs = _load(cluster, cache, ["m-0", "m-1"])
    binding = GroupBinding((GangBinding(GANG, tuple(Binding(r, node) for r in refs)),))
    credentials = load_credentials(str(cluster.access.kubeconfig))
    gone = replace(credentials, server=f"https://127.0.0.1:{_closed_port()}")

    async def scenario() -> Metrics:
        api = ApiClient(gone)
        metrics = Metrics.create()
        try:
            binder = Binder(
                api,
                cache,
                EventRecorder(api, component="test"),
                config=Config(),
                metrics=metrics,
                patience_seconds=1.0,  # asked again for a second, then no answer is no
            )
            binder.assume(binding)
            await binder.apply(binding)
            return metrics
        finally:
            await api.close()

    metrics = asyncio.run(scenario())
    assert metrics.registry.get_sample_value("gang_scheduler_bind_errors_total") == 1
    assert {p.node_name for p in cache.snapshot().pods} == {""}
    assert cache.memory[GANG].attempts == 1


def test_an_unanswered_bind_is_taken_as_done_only_if_the_pod_is_on_that_node(
    cluster: Cluster,
) -> None:
    """What the binder asks after a bind that got no answer (reset, timeout): the pod as the
    API server has it decides, uid and node both."""
    from e2e.objects import bind  # noqa: PLC0415

    first, second = cluster.nodes(2)
    cluster.apply(cluster.pod("m-0", scheduler="nobody"), cluster.pod("m-1", scheduler="nobody"))
    cache = ClusterCache(scheduler_name="nobody")
    landed_ref, pending_ref = _load(cluster, cache, ["m-0", "m-1"])
    bind(cluster.access.api(), namespace=cluster.namespace, pod="m-0", node=first)

    async def ask() -> list[tuple[bool, bool]]:
        api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
        try:
            binder = Binder(
                api, cache, EventRecorder(api, component="test"), config=Config(),
                metrics=Metrics.create(),
            )  # fmt: skip
            return [
                await binder._landed(Binding(landed_ref, first)),
                await binder._landed(Binding(landed_ref, second)),
                await binder._landed(Binding(replace(landed_ref, uid="other"), first)),
                await binder._landed(Binding(pending_ref, first)),
                await binder._landed(Binding(PodRef(cluster.namespace, "gone"), first)),
            ]
        finally:
            await api.close()

    # (landed on that node, still on no node)
    assert asyncio.run(ask()) == [
        (True, False),
        (False, False),  # on another node than asked: a rival's bind
        (False, False),  # another pod by that name
        (False, True),  # m-1: on no node, not going: may be bound if tried again
        (False, False),  # gone
    ]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
