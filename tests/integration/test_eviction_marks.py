"""A victim's mark against a real API server: it names the scheduler, and it lands only on
the very pod that was chosen (uid precondition), never on another made by the same name."""

from __future__ import annotations

import asyncio
import json

import pytest

from e2e.fixtures import Cluster, wait_for
from scheduler.codecs.objects import pod_from_dict
from scheduler.model.decisions import Eviction
from scheduler.model.pods import Pod
from scheduler.shell.api import ApiClient, load_credentials
from scheduler.shell.patching import Patcher

pytestmark = pytest.mark.cluster


def _pod(cluster: Cluster, name: str) -> Pod | None:
    found = cluster.access.kubectl(
        "get", "pod", name, "-n", cluster.namespace, "-o", "json", check=False
    )
    return pod_from_dict(json.loads(found.stdout)) if found.returncode == 0 else None


def _evict(cluster: Cluster, eviction: Eviction) -> None:
    async def run() -> None:
        api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
        try:
            await Patcher(api, retries=0, identity="gang-scheduler").evict(eviction)
        finally:
            await api.close()

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_mark_is_read_back_as_the_schedulers_and_lands_only_on_the_pod_chosen(
    cluster: Cluster,
) -> None:
    [node] = cluster.nodes(1)
    # The pod holds a finalizer-free bound spot (nodeName set: no scheduler involved).
    cluster.apply(cluster.pod("p", spec={"nodeName": node}))
    chosen = wait_for(lambda: _pod(cluster, "p"), timeout=30, what="pod p")
    assert isinstance(chosen, Pod)
    cluster.access.kubectl(
        "delete", "pod", "p", "-n", cluster.namespace, "--grace-period=0", "--force",
        "--wait=true",
    )  # fmt: skip
    cluster.apply(cluster.pod("p", spec={"nodeName": node}))
    again = wait_for(
        lambda: (p := _pod(cluster, "p")) is not None and p.ref.uid != chosen.ref.uid and p,
        timeout=30,
        what="pod p made again",
    )
    assert isinstance(again, Pod)
    _evict(cluster, Eviction(chosen.ref, node, "Preempted by gang x/y", whole_gang=True))
    after = _pod(cluster, "p")
    assert after is not None, "the pod made again is not deleted"
    assert after.ref.uid == again.ref.uid
    assert after.disrupted is None, "nor marked"
    # The pod made again, chosen itself: marked as the scheduler's, whole gang, then gone.
    cluster.access.kubectl("patch", "pod", "p", "-n", cluster.namespace, "--type=merge",
                           "-p", '{"metadata": {"finalizers": ["test/hold"]}}')  # fmt: skip
    _evict(cluster, Eviction(again.ref, node, "Preempted by gang x/y", whole_gang=True))
    held = _pod(cluster, "p")
    assert held is not None
    assert held.disrupted is not None
    assert (held.disrupted.by, held.disrupted.whole_gang) == ("gang-scheduler", True)
    cluster.access.kubectl("patch", "pod", "p", "-n", cluster.namespace, "--type=merge",
                           "-p", '{"metadata": {"finalizers": null}}')  # fmt: skip
