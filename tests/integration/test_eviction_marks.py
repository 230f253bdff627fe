"""A victim's mark against a real API server: it names the scheduler, and it lands only on
the very pod that was chosen (uid precondition), never on another made by the same name."""

from __future__ import annotations

import asyncio
import json
import time

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
            await Patcher(api, retries=0, identity="gang-scheduler").evict([eviction])
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


def test_a_move_its_disruption_budget_forbids_is_refused_by_the_api_server_and_not_sent_again(
    cluster: Cluster,
) -> None:
    """The Eviction API's own refusal (429, a disruption budget), as kube-apiserver words
    it, is read as such: the pod stays, and the move is not retried for minutes."""
    [node] = cluster.nodes(1)
    cluster.apply(cluster.pod("web", labels={"app": "web"}, spec={"nodeName": node}))
    cluster.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": cluster.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
    )

    def observed() -> bool:
        status = cluster.get("pdb", "web").get("status", {})
        return status.get("observedGeneration", 0) >= 1 and status.get("currentHealthy") == 1

    wait_for(observed, timeout=30, what="the disruption controller's status")
    web = wait_for(lambda: _pod(cluster, "web"), timeout=30, what="pod web")
    assert isinstance(web, Pod)
    move = Eviction(web.ref, node, "Moved by consolidation", moved_to="elsewhere")
    started = time.monotonic()
    _evict(cluster, move)
    assert time.monotonic() - started < 10, "a budget's refusal is final, not retried"
    after = _pod(cluster, "web")
    assert after is not None
    assert after.ref.uid == web.ref.uid, "the budget kept it"
