"""A small volume provisioner for the local control plane, doing what a CSI driver's
external-provisioner does for claims that wait for their first consumer: once a scheduler
writes ``volume.kubernetes.io/selected-node`` on a claim of its class, it makes a
PersistentVolume reachable from that node alone, pre-bound to the claim; the PV controller
(kube-controller-manager's persistentvolume-binder) then completes the binding.

A claim annotated ``testbed.gang-scheduler.io/provisioning: fail`` is refused as a driver
refuses one it cannot make there: a ``ProvisioningFailed`` Event, and the selected-node
annotation removed so that the scheduler chooses again (external-provisioner's
reschedule). It runs in a thread of the test process, looking every ``interval`` seconds.

Which claims it acts on (``selected_node``) and the volume it makes (``volume_for``) are
shared with the bench's provisioner (bench/volumes.py), which follows thousands of claims
by a watch, not by a LIST every ``interval``, and makes their volumes several at once."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from testbed.rest import Rest

NAME = "testbed.gang-scheduler.io/provisioner"
FAIL_ANNOTATION = "testbed.gang-scheduler.io/provisioning"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
HOSTNAME = "kubernetes.io/hostname"
# On every volume made: its claim's namespace, so that a namespace's volumes are found (and
# cleared) with one label selector.
CLAIM_NAMESPACE_LABEL = "testbed.gang-scheduler.io/claim-namespace"


def storage_class(name: str, *, provisioner: str = NAME) -> dict[str, Any]:
    """A StorageClass whose volumes this provisioner makes on the node chosen for them."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }


def selected_node(claim: dict[str, Any], classes: set[str]) -> str | None:
    """The node a scheduler chose for ``claim`` (its selected-node annotation), if the claim
    is of one of ``classes`` and has no volume yet: a claim its provisioner must act on,
    by making its volume there or refusing it. None for any other claim."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    node = (meta.get("annotations") or {}).get(SELECTED_NODE)
    if not node or spec.get("volumeName") or spec.get("storageClassName") not in classes:
        return None
    return node


def volume_for(claim: dict[str, Any], node: str) -> dict[str, Any]:
    """The PersistentVolume made for ``claim`` on ``node``: its size, modes and class,
    reachable from that node alone, pre-bound to it, labelled with the claim's namespace."""
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{meta['uid']}",
            "annotations": {"pv.kubernetes.io/provisioned-by": NAME},
            "labels": {CLAIM_NAMESPACE_LABEL: meta["namespace"]},
        },
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.get("storageClassName", ""),
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                         "namespace": meta["namespace"], "name": meta["name"],
                         "uid": meta["uid"]},
            "local": {"path": f"/mnt/testbed/{meta['uid']}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME, "operator": "In", "values": [node]}]}]}},
        },
    }  # fmt: skip


class Provisioner:
    """Makes the volumes of the claims of ``classes`` in ``namespace``; ``made`` and
    ``refused`` name the claims it made a volume for, or refused."""

    def __init__(self, rest: Rest, namespace: str, classes: set[str], *, interval: float = 0.1):
        self.rest = rest
        self.namespace = namespace
        self.classes = classes
        self.interval = interval
        self.made: list[str] = []
        self.refused: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="provisioner", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.look()
            except Exception as error:  # a test's thread: said in ``errors``, never dead
                self.errors.append(f"{type(error).__name__}: {error}")

    def look(self) -> None:
        """One look at the namespace's claims."""
        claims = self.rest.read("persistentvolumeclaims", namespace=self.namespace)
        for claim in claims.get("items") or []:
            node = selected_node(claim, self.classes)
            if node is None:
                continue
            meta = claim["metadata"]
            name = meta["name"]
            if (meta.get("annotations") or {}).get(FAIL_ANNOTATION) == "fail":
                self._refuse(claim, node)
            elif name not in self.made:
                self.rest.create(volume_for(claim, node))
                self.made.append(name)

    def _refuse(self, claim: dict[str, Any], node: str) -> None:
        meta = claim["metadata"]
        path = self.rest.path("persistentvolumeclaims", namespace=meta["namespace"])
        url = f"{self.rest.url}{path}/{meta['name']}"
        answer = self.rest.session.patch(
            url,
            json={"metadata": {"annotations": {SELECTED_NODE: None}}},
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=self.rest.timeout,
        )
        if answer.ok:
            self.refused.append(meta["name"])
            self.rest.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{time.monotonic_ns():x}",
                             "namespace": meta["namespace"]},
                "involvedObject": {"kind": "PersistentVolumeClaim", "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta["uid"]},
                "reason": "ProvisioningFailed", "type": "Warning",
                "message": f"failed to provision volume on node {node}: refused by the test",
                "source": {"component": NAME},
            })  # fmt: skip

    def start(self) -> Provisioner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def provisioning(rest: Rest, namespace: str, classes: set[str]) -> Iterator[Provisioner]:
    provisioner = Provisioner(rest, namespace, classes).start()
    try:
        yield provisioner
    finally:
        provisioner.stop()


def wait_gone(rest: Rest, names: list[str], *, timeout: float = 10.0) -> None:
    """Until the PersistentVolumes ``names`` are gone (a clean-up: it gives up quietly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {v["metadata"]["name"] for v in rest.read("persistentvolumes").get("items") or []}
        if not left.intersection(names):
            return
        time.sleep(0.2)
