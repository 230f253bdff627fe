"""Gangs whose pods' claims wait for their first consumer, on the real API server with the
PV controller (kube-controller-manager's persistentvolume-binder) and the testbed's
provisioner (testbed/provisioner.py), as a cluster with a CSI driver has them: a gang binds
whole with each volume made on its pod's node, no pod bound before its claim; a gang with no
room asks for no volume; a claim the provisioner refuses sends the whole gang back, nothing
bound meanwhile; static local volumes steer a gang to their nodes."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, stays_unbound, wait_bound
from scheduler.model.volumes import BIND_COMPLETED_ANNOTATION as BIND_COMPLETED
from testbed.provisioner import FAIL_ANNOTATION, SELECTED_NODE, provisioning, storage_class

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"


def _class(cluster: Cluster, short: str, **kw: Any) -> str:
    name = f"{cluster.namespace}-{short}"
    cluster.apply(storage_class(name, **kw))
    return name


def _claim(cluster: Cluster, name: str, storage_class: str, **annotations: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": cluster.namespace, "annotations": annotations},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip


def _member(cluster: Cluster, name: str, claim: str, scheduler: str, **kw: Any) -> dict:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    return cluster.pod(name, scheduler=scheduler, spec={"volumes": [volume]}, **kw)


def _apply_members(cluster: Cluster, members: dict[str, str], scheduler: str, *, cpu: str) -> None:
    """A Strict gang of ``members`` (pod -> the claim it names), each asking ``cpu``."""
    cluster.apply(*(
        _member(cluster, pod, claim, scheduler, requests={"cpu": cpu},
                annotations=koord("w", len(members)))
        for pod, claim in members.items()
    ))  # fmt: skip


def _claims(cluster: Cluster) -> dict[str, dict]:
    items = cluster.access.rest.read("persistentvolumeclaims", namespace=cluster.namespace)
    return {c["metadata"]["name"]: c for c in items.get("items") or []}


def _volume_node(cluster: Cluster, claim: dict) -> str:
    volume = cluster.access.rest.read("persistentvolumes", claim["spec"]["volumeName"])
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    return terms[0]["matchExpressions"][0]["values"][0]


def _each_bound_on_its_pods_node(cluster: Cluster, members: dict[str, str]) -> None:
    """Every claim of ``members`` (pod -> claim) is bound, to a volume on its pod's node."""
    claims, placed = _claims(cluster), cluster.placements()
    for pod, name in members.items():
        assert claims[name]["status"]["phase"] == "Bound", f"{name} is bound"
        assert _volume_node(cluster, claims[name]) == placed[pod], f"{name} is on {pod}'s node"


class BoundBeforeItsClaim:
    """Looks every 50 ms for a pod bound while one of its claims is not (what a correct
    scheduler never lets happen); ``seen`` names any. A claim is bound as kube-scheduler's
    ``isPVCFullyBound`` has it (its volumeName and the PV controller's bind-completed mark),
    not by its phase, which the PV controller writes a moment later in a status update of
    its own; and the pods are read before the claims, so that a claim read is never older
    than a bind read."""

    def __init__(self, cluster: Cluster, pods: dict[str, str]) -> None:
        self.cluster, self.pods = cluster, pods  # pod -> its claim
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                placed = self.cluster.placements()
                claims = _claims(self.cluster)
            except Exception:  # the API server away (a fault test restarts it): look again
                continue
            for pod, claim in self.pods.items():
                body = claims.get(claim, {})
                bound = bool((body.get("spec") or {}).get("volumeName")) and (
                    BIND_COMPLETED in ((body.get("metadata") or {}).get("annotations") or {})
                )
                if placed.get(pod) and not bound:
                    phase = (body.get("status") or {}).get("phase")
                    self.seen.append(f"{pod} bound while {claim} was not ({phase})")

    def __enter__(self) -> BoundBeforeItsClaim:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_a_gang_binds_whole_with_each_volume_made_on_its_pods_node(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes = cluster.nodes(3, cpu="4")
    scheduler = private_scheduler.start("--bind-volumes")
    made = _class(cluster, "made")
    members = {f"w-{i}": f"data-{i}" for i in range(3)}
    with provisioning(cluster.access.rest, cluster.namespace, {made}) as provisioner:
        cluster.apply(*(_claim(cluster, claim, made) for claim in members.values()))
        with BoundBeforeItsClaim(cluster, members) as watcher:
            _apply_members(cluster, members, private_scheduler.name, cpu="3")
            wait_bound(cluster, set(members))
        assert watcher.seen == [], "a pod was bound before its claim"
        assert sorted(provisioner.made) == sorted(members.values())
    placed = cluster.placements()
    assert sorted(placed[pod] for pod in members) == sorted(nodes), "one a node"
    _each_bound_on_its_pods_node(cluster, members)
    scheduler.assert_alive()


def test_a_gang_with_no_room_asks_for_no_volume(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(2, cpu="4")
    scheduler = private_scheduler.start("--bind-volumes")
    made = _class(cluster, "made")
    members = {f"w-{i}": f"data-{i}" for i in range(3)}
    with provisioning(cluster.access.rest, cluster.namespace, {made}) as provisioner:
        cluster.apply(*(_claim(cluster, claim, made) for claim in members.values()))
        _apply_members(cluster, members, private_scheduler.name, cpu="3")
        wait_for(
            lambda: any("w-" in m for m in cluster.events("FailedScheduling")),
            timeout=BIND_TIMEOUT,
            what="the gang said it does not fit",
        )
        stays_unbound(cluster, set(members), seconds=2)
        asked = [
            n
            for n, c in _claims(cluster).items()
            if SELECTED_NODE in c["metadata"].get("annotations", {})
        ]
        assert asked == [], "no volume is asked for a gang that cannot be placed whole"
        assert provisioner.made == []
    scheduler.assert_alive()


def test_a_refused_claim_sends_the_whole_gang_back_with_nothing_bound(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(3, cpu="4")
    scheduler = private_scheduler.start("--bind-volumes")
    made = _class(cluster, "made")
    members = {f"w-{i}": f"data-{i}" for i in range(3)}
    with provisioning(cluster.access.rest, cluster.namespace, {made}) as provisioner:
        cluster.apply(
            _claim(cluster, "data-0", made),
            _claim(cluster, "data-1", made, **{FAIL_ANNOTATION: "fail"}),
            _claim(cluster, "data-2", made),
        )
        with BoundBeforeItsClaim(cluster, members) as watcher:
            _apply_members(cluster, members, private_scheduler.name, cpu="3")
            wait_for(
                lambda: any("gave it back" in m for m in cluster.events("FailedScheduling")),
                timeout=BIND_TIMEOUT,
                what="a FailedScheduling event saying the provisioner gave the claim back",
            )
            stays_unbound(cluster, set(members), seconds=2)
            assert provisioner.refused, "the provisioner refused data-1"
            # The driver can make it now: the gang goes again and binds whole.
            cluster.access.kubectl(
                "annotate", "pvc", "data-1", f"{FAIL_ANNOTATION}-", "-n", cluster.namespace
            )
            wait_bound(cluster, set(members))
        assert watcher.seen == []
    scheduler.assert_alive()


def test_static_local_volumes_steer_a_gang_to_their_nodes(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes = sorted(cluster.nodes(4, cpu="8"))
    scheduler = private_scheduler.start("--bind-volumes")
    local = _class(cluster, "local", provisioner="kubernetes.io/no-provisioner")
    chosen = nodes[1:3]
    volumes = [
        {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"{cluster.namespace}-local-{i}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": local, "local": {"path": "/mnt/disk"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": HOSTNAME, "operator": "In", "values": [node]}]}]}}},
        }
        for i, node in enumerate(chosen)
    ]  # fmt: skip
    try:
        cluster.apply(*volumes)
        cluster.apply(*(_claim(cluster, f"data-{i}", local) for i in range(2)))
        cluster.apply(*(
            _member(cluster, f"w-{i}", f"data-{i}", private_scheduler.name,
                    annotations=koord("w", 2))
            for i in range(2)
        ))  # fmt: skip
        wait_bound(cluster, {"w-0", "w-1"})
        placed = cluster.placements()
        assert sorted(placed[p] for p in ("w-0", "w-1")) == chosen
        wait_for(
            lambda: all(
                c.get("status", {}).get("phase") == "Bound" for c in _claims(cluster).values()
            ),
            timeout=BIND_TIMEOUT,
            what="both claims bound",
        )
    finally:
        for volume in volumes:
            cluster.access.rest.remove("persistentvolumes", volume["metadata"]["name"])
    scheduler.assert_alive()


def _scratch_member(cluster: Cluster, name: str, storage_class: str, scheduler: str) -> dict:
    template = {
        "volumeClaimTemplate": {
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": "1Gi"}},
            }
        }
    }
    return cluster.pod(
        name,
        scheduler=scheduler,
        spec={"volumes": [{"name": "scratch", "ephemeral": template}]},
        requests={"cpu": "3"},
        annotations=koord("w", 2),
    )


def test_a_gang_with_ephemeral_volumes_binds_with_the_claims_made_for_its_pods(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(2, cpu="4")
    scheduler = private_scheduler.start("--bind-volumes")
    made = _class(cluster, "made")
    members = ["w-0", "w-1"]
    with provisioning(cluster.access.rest, cluster.namespace, {made}) as provisioner:
        cluster.apply(*(_scratch_member(cluster, m, made, private_scheduler.name) for m in members))
        wait_bound(cluster, set(members))
        assert sorted(provisioner.made) == [f"{m}-scratch" for m in members]
    _each_bound_on_its_pods_node(cluster, {pod: f"{pod}-scratch" for pod in members})
    scheduler.assert_alive()


def test_a_gang_whose_ephemeral_claim_name_is_taken_waits_and_says_whose_it_is(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(2, cpu="4")
    scheduler = private_scheduler.start("--bind-volumes")
    made = _class(cluster, "made")
    members = ["w-0", "w-1"]
    with provisioning(cluster.access.rest, cluster.namespace, {made}):
        cluster.apply(_claim(cluster, "w-1-scratch", made))  # made by hand: no pod controls it
        cluster.apply(*(_scratch_member(cluster, m, made, private_scheduler.name) for m in members))
        wanted = f"PVC {cluster.namespace}/w-1-scratch was not created for pod"
        wait_for(
            lambda: any(wanted in m for m in cluster.events("FailedScheduling")),
            timeout=BIND_TIMEOUT,
            what=f"FailedScheduling saying {wanted!r}",
        )
        stays_unbound(cluster, set(members), seconds=2)
    scheduler.assert_alive()


def test_a_gang_is_spread_over_pools_a_driver_says_hold_two_of_its_volumes_each(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """The driver publishes 100Gi left on each node (CSIStorageCapacity) and the gang's
    three members ask 40Gi each: no node's pool holds all three."""
    nodes = cluster.nodes(2, cpu="8")
    scheduler = private_scheduler.start("--bind-volumes")
    driver = f"{cluster.namespace}.csi.example.com"
    cluster.apply({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                   "metadata": {"name": driver}, "spec": {"storageCapacity": True}})  # fmt: skip
    made = _class(cluster, "lvm", provisioner=driver)
    cluster.apply(*(
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
         "metadata": {"name": f"cap-{n}", "namespace": cluster.namespace},
         "storageClassName": made, "capacity": "100Gi",
         "nodeTopology": {"matchLabels": {HOSTNAME: n}}}
        for n in nodes
    ))  # fmt: skip
    members = {f"w-{i}": f"data-{i}" for i in range(3)}
    with provisioning(cluster.access.rest, cluster.namespace, {made}):
        claims = [_claim(cluster, claim, made) for claim in members.values()]
        for claim in claims:
            claim["spec"]["resources"]["requests"]["storage"] = "40Gi"
        cluster.apply(*claims)
        _apply_members(cluster, members, private_scheduler.name, cpu="1")
        wait_bound(cluster, set(members))
    per_node = sorted(Counter(cluster.placements()[pod] for pod in members).values())
    assert per_node == [1, 2], "two volumes of 40Gi in a pool of 100Gi, never three"
    scheduler.assert_alive()


def test_a_gang_is_spread_by_the_csi_attach_limits_of_its_nodes(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """Each node may attach one volume of the driver (its CSINode's allocatable.count):
    the gang's two members, packed on one node by their cpu, go one to a node."""
    nodes = cluster.nodes(2, cpu="8")
    scheduler = private_scheduler.start("--bind-volumes")
    driver = f"attach-{cluster.namespace[-5:]}.example.com"  # a CSINode names it in 63 bytes
    cluster.apply(*(
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": n},
         "spec": {"drivers": [{"name": driver, "nodeID": n, "allocatable": {"count": 1}}]}}
        for n in nodes
    ))  # fmt: skip
    made = _class(cluster, "attached", provisioner=driver)
    members = {f"w-{i}": f"data-{i}" for i in range(2)}
    with provisioning(cluster.access.rest, cluster.namespace, {made}):
        cluster.apply(*(_claim(cluster, claim, made) for claim in members.values()))
        _apply_members(cluster, members, private_scheduler.name, cpu="1")
        wait_bound(cluster, set(members))
    placed = cluster.placements()
    assert sorted(placed[pod] for pod in members) == sorted(nodes), "one a node"
    scheduler.assert_alive()


def test_a_node_a_killed_scheduler_asked_for_is_released_and_the_gang_goes_elsewhere(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """The scheduler asks for the gang's volume on a node and is killed while it waits (no
    provisioner yet): nothing takes its choice back, and the node fills up meanwhile. The
    next scheduler may not put the gang there, nor elsewhere while the claim names that
    node; once the wait (--volume-bind-timeout) and its grace are over, it releases the
    choice, and the gang binds on the node left, with its volume made there."""
    from e2e.test_incarnations import occupy  # noqa: PLC0415

    nodes = cluster.nodes(2, cpu="4")
    flags = ("--bind-volumes", "--volume-bind-timeout", "3")
    first = private_scheduler.start(*flags)
    made = _class(cluster, "made")
    members = {"w-0": "data-0"}
    cluster.apply(_claim(cluster, "data-0", made))
    _apply_members(cluster, members, private_scheduler.name, cpu="3")

    def asked() -> str:
        return (_claims(cluster)["data-0"]["metadata"].get("annotations") or {}).get(
            SELECTED_NODE, ""
        )

    chosen = wait_for(asked, timeout=BIND_TIMEOUT, what="a node asked for the claim's volume")
    first.kill()
    occupy(cluster, chosen, cpu="4")
    second = private_scheduler.start(*flags)
    stays_unbound(cluster, set(members), seconds=2)  # held to the full node meanwhile
    wait_for(lambda: not asked(), timeout=BIND_TIMEOUT, what="the choice released")
    # The provisioner only now: it would make the volume wherever the claim says.
    with provisioning(cluster.access.rest, cluster.namespace, {made}) as provisioner:
        wait_bound(cluster, set(members))
    (other,) = set(nodes) - {chosen}
    assert cluster.placements()["w-0"] == other
    assert provisioner.made == ["data-0"]
    _each_bound_on_its_pods_node(cluster, members)
    assert "volume choice released" in second.log.read_text()
    second.assert_alive()
