"""A re-list against a real API server makes the cache what the LIST says: what a watch
missed while it was away is folded in, what was deleted meanwhile is dropped, and what a
watch delivered after the LIST began is left as the watch said."""

from __future__ import annotations

import asyncio
import json

import pytest

from e2e.fixtures import Cluster
from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.objects import pod_from_dict
from scheduler.shell.api import ApiClient, load_credentials
from scheduler.shell.syncing import fold_listing, list_objects

pytestmark = pytest.mark.cluster


def _pods(cluster: Cluster) -> dict[str, dict]:
    out = cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    return {p["metadata"]["name"]: p for p in json.loads(out)["items"]}


async def _resync(cluster: Cluster, cache: ClusterCache) -> list[str]:
    api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
    try:
        since = cache.listing("pods")
        return fold_listing(cache, "pods", await list_objects(api, "pods"), since=since)
    finally:
        await api.close()


def test_a_bind_the_watch_missed_is_folded_in_and_takes_its_room(cluster: Cluster) -> None:
    """The old leader's last bind landed while this replica's watch was cut: the re-list
    must show the pod on its node, or the next pass gives its room away."""
    (node,) = cluster.nodes(1, cpu="4")
    # A scheduler name of the test's own: the session's gang-scheduler (running once an e2e
    # test has started it) would bind the pod before the old leader's bind could.
    cluster.apply(cluster.pod("late", scheduler="resync-test", requests={"cpu": "3"}))
    cache = ClusterCache(scheduler_name="resync-test")
    cache.upsert_pod(pod_from_dict(_pods(cluster)["late"]))  # seen pending, then the cut
    cluster.access.kubectl(
        "create", "-f", "-", "--raw",
        f"/api/v1/namespaces/{cluster.namespace}/pods/late/binding",
        stdin=json.dumps({"apiVersion": "v1", "kind": "Binding",
                          "metadata": {"name": "late"}, "target": {"kind": "Node", "name": node}}),
    )  # fmt: skip
    assert asyncio.run(_resync(cluster, cache)) == []
    snapshot = cache.snapshot(whole=True)
    assert snapshot.infos()[node].requested["cpu"] == 3000


def test_a_deletion_delivered_after_the_list_began_is_not_undone(cluster: Cluster) -> None:
    cluster.nodes(1)
    cluster.apply(cluster.pod("gone"))
    body = _pods(cluster)["gone"]
    cache = ClusterCache(scheduler_name="gang-scheduler")
    since = cache.listing("pods")  # a LIST that still shows it begins...
    cache.remove_pod(body["metadata"]["uid"])  # ...and the watch says DELETED meanwhile
    assert not cache.stale("pods", body["metadata"]["uid"], since=since)
    assert fold_listing(cache, "pods", [body], since=since) == []
    assert body["metadata"]["uid"] not in cache.nodes.pods, "the LIST did not bring it back"
