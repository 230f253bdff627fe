"""kube-scheduler as the oracle for what a pod spec allows (issue #11).

A random case: a few KWOK nodes with random labels, taints and capacity; a few pods bound
to them directly (``spec.nodeName``) with random labels, requests, host ports and required
anti-affinity; and one pending pod with random constraints of every kind the core
implements (requests, node selector and affinity, tolerations, host ports, required pod
affinity and anti-affinity, topology spread, scheduling gates), pinned by a node selector on
``kubernetes.io/hostname`` to one candidate node. The question "may this pod go on that
node?" is asked of kube-scheduler (built from the same ``k8s.io/kubernetes`` module as the
API server: the pod is bound, or gets ``PodScheduled=False``) and of this scheduler's core
(``schedule`` on the same objects, read back from the API server). Every label value is
unique to the case, so cases never see each other.

    python -m e2e.oracle --cases 300 --seed 1    # on a control plane of its own
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pykube
import yaml

from scheduler.codecs.cel import Selectors
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.codecs.volumes import (
    claim_from_dict,
    csi_driver_from_dict,
    storage_capacity_from_dict,
    storage_class_from_dict,
    volume_from_dict,
)
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import Result
from scheduler.model.devices import DEVICE_CLASS_RESOURCE, EXTENDED_CLAIM_ANNOTATION
from scheduler.model.nodes import Node
from scheduler.model.pods import Pod
from scheduler.model.snapshot import Snapshot
from testbed import cluster as local_cluster
from testbed.nodes import FakeNode, node_manifest
from testbed.provisioner import NAME as PROVISIONER
from testbed.provisioner import provisioning
from testbed.rest import Rest

HOST = "kubernetes.io/hostname"
ORACLE_DIR = local_cluster.REPO / ".cluster-oracle"
ANSWER_SECONDS = 20.0
OURS = Config().scheduler_name


@dataclass
class Case:
    """One question, as the objects to create."""

    number: int
    nodes: list[dict]
    bound: list[dict]
    pending: dict
    candidate: str
    namespace: str
    notes: list[str] = field(default_factory=list)
    # Dynamic resource allocation: DeviceClasses, ResourceSlices and ResourceClaims, and the
    # status (allocations) written to some claims before the question is asked.
    objects: list[dict] = field(default_factory=list)
    statuses: dict[str, dict] = field(default_factory=dict)

    def yaml(self) -> str:
        pods = json.loads(self.notes[0]) if self.notes else [self.pending]
        held = [{"claim": name, "status": status} for name, status in sorted(self.statuses.items())]
        return yaml.safe_dump_all(
            [*self.nodes, *self.objects, *held, *self.bound, *pods], sort_keys=False
        )


def _selector(rng: random.Random, apps: list[str]) -> dict:
    """A label selector on ``app`` in one of its forms."""
    form = rng.choice(["labels", "in", "notin", "exists", "doesnotexist"])
    if form == "labels":
        return {"matchLabels": {"app": rng.choice(apps)}}
    if form == "in":
        return {"matchExpressions": [{"key": "app", "operator": "In",
                                      "values": rng.sample(apps, rng.randint(1, 2))}]}  # fmt: skip
    if form == "notin":
        return {"matchExpressions": [{"key": "app", "operator": "NotIn",
                                      "values": [rng.choice(apps)]}]}  # fmt: skip
    operator = "Exists" if form == "exists" else "DoesNotExist"
    return {"matchExpressions": [{"key": "app", "operator": operator}]}


def _term(rng: random.Random, apps: list[str], keys: list[str]) -> dict:
    term: dict[str, Any] = {"labelSelector": _selector(rng, apps), "topologyKey": rng.choice(keys)}
    if rng.random() < 0.15:
        term["namespaceSelector"] = {}  # every namespace
    return term


def _ports(rng: random.Random) -> list[dict]:
    choice = rng.choice([None, None, ("TCP", ""), ("UDP", ""), ("TCP", "127.0.0.1")])
    if choice is None:
        return []
    protocol, ip = choice
    port = {"containerPort": 80, "hostPort": 8080, "protocol": protocol}
    if ip:
        port["hostIP"] = ip
    return [port]


def _container(rng: random.Random, cpu: str) -> dict:
    return {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
        "ports": _ports(rng),
    }


def random_case(rng: random.Random, number: int) -> Case:
    ns = f"oracle-{number}"
    zones = [f"o{number}-z{i}" for i in range(2)]
    apps = [f"o{number}-a", f"o{number}-b"]
    keys = [HOST, "topology.kubernetes.io/zone"]
    taints = [
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
        {"key": "gpu", "effect": "NoExecute"},
        {"key": "soft", "effect": "PreferNoSchedule"},
    ]
    nodes = []
    for i in range(rng.randint(1, 3)):
        labels = {"topology.kubernetes.io/zone": rng.choice(zones)}
        if rng.random() < 0.5:
            labels["disk"] = rng.choice(["ssd", "hdd"])
        manifest = node_manifest(
            FakeNode(f"o{number}-n{i}", labels), cpu=rng.choice(["2", "4"]), memory="8Gi"
        )
        if rng.random() < 0.3:
            manifest["spec"] = {"taints": [rng.choice(taints)]}
        nodes.append(manifest)
    names = [n["metadata"]["name"] for n in nodes]
    bound = []
    for j in range(rng.randint(0, 4)):
        spec: dict[str, Any] = {
            "nodeName": rng.choice(names),
            "containers": [_container(rng, rng.choice(["500m", "1"]))],
        }
        if rng.random() < 0.4:
            terms = [_term(rng, apps, keys)]
            spec["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}
            }
        bound.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"e{j}", "namespace": ns, "labels": {"app": rng.choice(apps)}},
            "spec": spec,
        })  # fmt: skip
    candidate = rng.choice(names)
    spec = {
        "schedulerName": "default-scheduler",
        "nodeSelector": {HOST: candidate},
        "containers": [_container(rng, rng.choice(["500m", "1", "2"]))],
    }
    if rng.random() < 0.2:
        spec["nodeSelector"]["disk"] = rng.choice(["ssd", "hdd"])
    if rng.random() < 0.4:
        spec["tolerations"] = [
            {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
            for t in rng.sample(taints, rng.randint(1, 2))
        ]
    affinity: dict[str, Any] = {}
    if rng.random() < 0.4:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term(rng, apps, keys) for _ in range(rng.randint(1, 2))]}  # fmt: skip
    if rng.random() < 0.4:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term(rng, apps, keys)]}  # fmt: skip
    if rng.random() < 0.15:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In",
                 "values": [rng.choice(zones)]}]}]}}  # fmt: skip
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.3:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": rng.randint(1, 2), "topologyKey": rng.choice(keys),
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": _selector(rng, apps),
            "nodeAffinityPolicy": rng.choice(["Honor", "Ignore"]),
            "nodeTaintsPolicy": rng.choice(["Honor", "Ignore"]),
            **({"minDomains": rng.randint(1, 3)} if rng.random() < 0.3 else {}),
        }]  # fmt: skip
    if rng.random() < 0.1:
        spec["schedulingGates"] = [{"name": "example.com/gate"}]
    pending = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "asked", "namespace": ns, "labels": {"app": rng.choice(apps)}},
        "spec": spec,
    }  # fmt: skip
    return Case(number, nodes, bound, pending, candidate, ns)


class Plane:
    """A control plane of its own with kube-scheduler running against it, spoken to over
    HTTP (``rest``): a case makes a dozen requests and more, and a kubectl process for each
    took some 0.15 s of a 2-core machine, most of a case's 2.5 s."""

    def __init__(self, directory: Path = ORACLE_DIR) -> None:
        self.directory = directory
        self.plane = local_cluster.up(directory)
        binaries = local_cluster.resolve_binaries()
        if binaries.kube_scheduler is None or not binaries.kube_scheduler.is_file():
            raise local_cluster.ClusterError(
                "kube-scheduler is missing: e2e/controlplane/build.sh builds it (it is in "
                "the list of binaries it builds and caches)"
            )
        self.kubeconfig = self.plane.kubeconfig
        client = pykube.HTTPClient(pykube.KubeConfig.from_file(str(self.kubeconfig)))
        self.rest = Rest(client, timeout=60)  # as long as kubectl was given
        log = (directory / "logs" / "kube-scheduler.log").open("ab")
        self.scheduler = subprocess.Popen(
            [str(binaries.kube_scheduler), f"--kubeconfig={self.kubeconfig}",
             "--leader-elect=false", "--secure-port=0", "-v=1"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def close(self) -> None:
        self.scheduler.terminate()
        try:
            self.scheduler.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.scheduler.kill()
        local_cluster.down(self.directory)


@contextmanager
def oracle_plane() -> Iterator[Plane]:
    local_cluster.down(ORACLE_DIR)  # whatever an interrupted run left behind
    plane = Plane()
    try:
        yield plane
    finally:
        plane.close()


@dataclass(frozen=True)
class Answer:
    kube: bool
    kube_message: str
    ours: bool
    our_message: str

    @property
    def agree(self) -> bool:
        return self.kube == self.ours


def _kube_answer(
    plane: Plane, case: Case, *, name: str = "asked", ungated: bool = False
) -> tuple[bool, str]:
    """``ungated``: its gates were just removed, so a SchedulingGated condition is the one
    from before, not an answer."""
    final = ("Unschedulable", "SchedulerError") if ungated else (
        "Unschedulable", "SchedulingGated", "SchedulerError")  # fmt: skip
    deadline = time.monotonic() + ANSWER_SECONDS
    while time.monotonic() < deadline:
        pod = plane.rest.read("pods", name, namespace=case.namespace)
        if pod["spec"].get("nodeName"):
            return True, f"bound to {pod['spec']['nodeName']}"
        for c in pod.get("status", {}).get("conditions", []):
            # SchedulerError: a filter failed with an error (the DynamicResources plugin's
            # for some allocations it gives up on): it is not placed, and retried.
            if (c["type"], c["status"]) == ("PodScheduled", "False") and c.get("reason") in final:
                return False, f"{c.get('reason')}: {c.get('message', '')}"
        time.sleep(0.1)
    raise TimeoutError(f"kube-scheduler said nothing of case {case.number} in {ANSWER_SECONDS}s")


def _nodes(plane: Plane, names: list[str]) -> dict[str, Node]:
    """The case's nodes as the API server holds them (Ready, as KWOK made them), decoded."""
    return {n.name: n for n in (node_from_dict(plane.rest.read("nodes", name)) for name in names)}


def _our_answer(plane: Plane, case: Case) -> tuple[bool, str]:
    nodes = _nodes(plane, [n["metadata"]["name"] for n in case.nodes])
    raw_pods = plane.rest.read("pods", namespace=case.namespace)
    pods = []
    for raw in raw_pods["items"]:
        pod = pod_from_dict(raw)
        if pod.ref.name == "asked":
            pod = replace(pod, scheduler_name=OURS, node_name="", scheduled_condition=None)
        pods.append(pod)
    result = schedule(Snapshot(nodes=nodes, pods=tuple(pods)), now=time.time())
    placed = {b.pod.name: b.node for g in result.bindings for b in g.bindings}
    if placed.get("asked") == case.candidate:
        return True, f"bound to {case.candidate}"
    said = [e.message for e in result.events if e.regarding.name == "asked"]
    return False, said[0] if said else "no event"


@contextmanager
def _staged(plane: Plane, case: Case) -> Iterator[list[str]]:
    """The case's namespace and Ready nodes (their names), removed afterwards."""
    plane.rest.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": case.namespace}}
    )
    names_ = [n["metadata"]["name"] for n in case.nodes]
    try:
        plane.rest.create(*case.nodes)
        plane.rest.wait_ready(names_)
        yield names_
    finally:
        plane.rest.remove("namespaces", case.namespace)
        for name in names_:
            plane.rest.remove("nodes", name)


def ask(plane: Plane, case: Case) -> Answer:
    with _staged(plane, case):
        plane.rest.create(*case.bound, case.pending)
        kube, kube_message = _kube_answer(plane, case)
        # The same objects, read back from the API server (the pending pod as ours).
        ours, our_message = _our_answer(plane, case)
        return Answer(kube, kube_message, ours, our_message)


def random_gang_case(rng: random.Random, number: int) -> Case:
    """A gang of 2-6 members that must spread: mutual required anti-affinity on hostname or
    zone, or a DoNotSchedule spread over zones; on nodes only it selects (by a case label)."""
    ns = f"oracle-{number}"
    mark = {"oracle-case": str(number)}
    zones = [f"o{number}-z{i}" for i in range(rng.randint(1, 3))]
    nodes = [
        node_manifest(
            FakeNode(f"o{number}-n{i}", {"topology.kubernetes.io/zone": rng.choice(zones), **mark}),
            cpu=rng.choice(["1", "2", "4"]),
            memory="8Gi",
        )
        for i in range(rng.randint(2, 5))
    ]
    app = f"o{number}-g"
    size = rng.randint(2, 6)
    key = rng.choice([HOST, "topology.kubernetes.io/zone"])
    spec: dict[str, Any] = {"schedulerName": "default-scheduler", "nodeSelector": dict(mark)}
    if rng.random() < 0.6:
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    else:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}},
        }]  # fmt: skip
    members = [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"m{i}", "namespace": ns, "labels": {"app": app},
                      "annotations": {names.KOORD_NAME: "g", names.KOORD_MIN_AVAILABLE: str(size)}},
         "spec": {**spec, "containers": [_container(random.Random(0), "500m")]}}
        for i in range(size)
    ]  # fmt: skip
    return Case(number, nodes, [], members[0], "", ns, notes=[json.dumps(members)])


def ask_gang(plane: Plane, case: Case) -> Answer:
    """kube-scheduler member by member (each waits for its answer); the core on the whole
    gang at once. Either all members fit or not."""
    members = json.loads(case.notes[0])
    with _staged(plane, case) as names_:
        nodes = _nodes(plane, names_)
        result = schedule(Snapshot(nodes=nodes, pods=_as_ours(members)), now=time.time())
        placed = [b for g in result.bindings for b in g.bindings]
        ours = len(placed) == len(members)
        return _gang_answer(plane, case, members, result, ours=ours)


def _as_ours(members: list[dict]) -> tuple[Pod, ...]:
    """The members as pods of ours, each with a uid (the API server has not seen them)."""
    return tuple(
        replace(
            pod_from_dict({**m, "metadata": {**m["metadata"], "uid": f"u{i}"}}),
            scheduler_name=OURS,
        )
        for i, m in enumerate(members)
    )


def _gang_answer(
    plane: Plane, case: Case, members: list[dict], result: Result, *, ours: bool
) -> Answer:
    """kube-scheduler member by member (each waits for its answer), beside ours."""
    said = [e.message for e in result.events if e.reason == "FailedScheduling"]
    kube, message = True, "all bound"
    for member in members:
        plane.rest.create(member)
        single = replace(case, pending=member)
        bound, why = _kube_answer(plane, single, name=member["metadata"]["name"])
        if not bound:
            kube, message = False, f"{member['metadata']['name']}: {why}"
            break
    return Answer(kube, message, ours, "all bound" if ours else (said[0] if said else "-"))


# -- dynamic resource allocation (#24) ---------------------------------------------------------

GPU_DRIVER = "gpu.example.com"
DOMAIN_DRIVER = "domain.example.com"
DRA_SELECTORS = (
    'device.attributes["gpu.example.com"].model == "A"',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("60Gi")) >= 0',
    'device.attributes["gpu.example.com"].index % 2 == 0',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.5.0"))',
    '"gpu.example.com" in device.attributes',
    'device.attributes["gpu.example.com"].model.lowerAscii() in ["a", "c"]',
)


def _gpu_devices(rng: random.Random, count: int, domain: str) -> list[dict]:
    devices = []
    for i in range(count):
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {
                "model": {"string": rng.choice(["A", "B"])},
                "index": {"int": i},
                "nvlinkDomain": {"string": rng.choice([domain, f"{domain}x"])},
                "driverVersion": {"version": rng.choice(["1.0.0", "2.1.0"])},
            },
            "capacity": {"memory": {"value": rng.choice(["40Gi", "80Gi"])}},
        }
        if rng.random() < 0.1:
            device["taints"] = [{"key": "broken", "value": "ecc", "effect": "NoSchedule"}]
        devices.append(device)
    return devices


def _device_request(rng: random.Random, name: str, gpu_class: str) -> dict:
    def one(sub_name: str) -> dict:
        body: dict[str, Any] = {"deviceClassName": gpu_class}
        if rng.random() < 0.1:
            body["allocationMode"] = "All"
        else:
            body["count"] = rng.choice([1, 1, 2, 3])
        if rng.random() < 0.35:
            body["selectors"] = [{"cel": {"expression": rng.choice(DRA_SELECTORS)}}]
        if rng.random() < 0.3:
            body["tolerations"] = [{"key": "broken", "operator": "Exists"}]
        return {"name": sub_name, **body}

    if rng.random() < 0.2:
        return {"name": name, "firstAvailable": [one("big"), one("small")]}
    request = one(name)
    return {"name": name, "exactly": {k: v for k, v in request.items() if k != "name"}}


def random_dra_case(rng: random.Random, number: int) -> Case:
    """A pod with one or two ResourceClaims (counts, All, firstAvailable, CEL selectors,
    taints and tolerations, matchAttribute) on devices published for 1-2 nodes, some of
    them allocated to a claim already; pinned to one node."""
    ns = f"oracle-{number}"
    mark = {"oracle-case": str(number)}
    rack = f"o{number}-r"
    nodes = [
        node_manifest(FakeNode(f"o{number}-n{i}", {**mark, "rack": rack}), cpu="8", memory="8Gi")
        for i in range(rng.randint(1, 2))
    ]
    names_ = [n["metadata"]["name"] for n in nodes]
    candidate = rng.choice(names_)
    gpu_class, domain_class = f"o{number}-gpu", f"o{number}-domain"
    class_selectors = [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]
    if rng.random() < 0.2:
        class_selectors.append({"cel": {"expression": rng.choice(DRA_SELECTORS)}})
    objects: list[dict] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": gpu_class, "labels": mark}, "spec": {"selectors": class_selectors}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": domain_class, "labels": mark},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DOMAIN_DRIVER}"'}}]}},
    ]  # fmt: skip
    pools: list[tuple[str, list[dict]]] = []
    for node_name in names_:
        for p in range(rng.randint(1, 2)):
            pool = f"{node_name}-p{p}"
            devices = _gpu_devices(rng, rng.choice([0, 2, 4, 6, 8]), f"d{p}")
            pools.append((pool, devices))
            objects.append({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": pool, "labels": mark},
                "spec": {"driver": GPU_DRIVER, "nodeName": node_name, "devices": devices,
                         "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}},
            })  # fmt: skip
    channel = rng.random() < 0.3
    if channel:
        reach = rack if rng.random() < 0.8 else f"{rack}-elsewhere"
        objects.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"o{number}-channel", "labels": mark},
            "spec": {"driver": DOMAIN_DRIVER,
                     "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "rack", "operator": "In", "values": [reach]}]}]},
                     "pool": {"name": f"o{number}-channel", "generation": 1,
                              "resourceSliceCount": 1},
                     "devices": [{"name": "channel"}]},
        })  # fmt: skip
    statuses: dict[str, dict] = {}
    taken = [(pool, d["name"]) for pool, devices in pools for d in devices]
    if taken and rng.random() < 0.5:
        held = rng.sample(taken, rng.randint(1, min(2, len(taken))))
        objects.append(
            _claim(
                "held",
                ns,
                [{"name": "r", "exactly": {"deviceClassName": gpu_class, "count": len(held)}}],
            )
        )
        statuses["held"] = {"allocation": {"devices": {"results": [
            {"request": "r", "driver": GPU_DRIVER, "pool": pool, "device": device}
            for pool, device in held]}}}  # fmt: skip
    claims = []
    for c in range(rng.randint(1, 2)):
        requests = [_device_request(rng, f"r{r}", gpu_class) for r in range(rng.randint(1, 2))]
        constraints = []
        if rng.random() < 0.2:
            constraints = [{"matchAttribute": f"{GPU_DRIVER}/nvlinkDomain"}]
        objects.append(_claim(f"c{c}", ns, requests, constraints))
        claims.append(f"c{c}")
    if channel:
        channel_request = [{"name": "ch", "exactly": {"deviceClassName": domain_class}}]
        objects.append(_claim("channel", ns, channel_request))
        claims.append("channel")
    requests: dict[str, str] = {"cpu": "500m"}
    limits: dict[str, str] = {}
    if rng.random() < 0.35:
        # GPUs asked by resource name (KEP-5004): the class's extendedResourceName or its
        # implicit name; now and then with no claim of the pod's own besides.
        explicit = rng.random() < 0.5
        resource = f"o{number}.example.com/gpu" if explicit else DEVICE_CLASS_RESOURCE + gpu_class
        if explicit:
            objects[0]["spec"]["extendedResourceName"] = resource
        requests[resource] = limits[resource] = str(rng.choice([1, 1, 2, 3]))
        if rng.random() < 0.3:
            claims = []
    pending = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "asked", "namespace": ns},
        "spec": {"schedulerName": "default-scheduler", "nodeSelector": {HOST: candidate},
                 "containers": [{**_container(rng, "500m"),
                                 "resources": {"requests": requests, "limits": limits,
                                               "claims": [{"name": c} for c in claims]}}],
                 "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims]},
    }  # fmt: skip
    return Case(number, nodes, [], pending, candidate, ns, objects=objects, statuses=statuses)


def _claim(
    name: str, namespace: str, requests: list[dict], constraints: list | None = None
) -> dict:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"devices": devices},
    }  # fmt: skip


def _device_world(plane: Plane, case: Case) -> dict[str, Any]:
    """Slices, classes and claims as the API server holds them, decoded."""
    mark = f"oracle-case={case.number}"
    slices = plane.rest.read("resourceslices", labelSelector=mark)
    classes = plane.rest.read("deviceclasses", labelSelector=mark)
    claims = plane.rest.read("resourceclaims", namespace=case.namespace)
    decoded = [resource_claim_from_dict(c) for c in claims["items"]]
    return {
        "resource_slices": tuple(slice_from_dict(s) for s in slices["items"]),
        "device_classes": {
            c.name: c for c in (device_class_from_dict(d) for d in classes["items"])
        },
        "resource_claims": {c.key: c for c in decoded},
        "selectors": DRA_EVALUATOR.evaluate,
    }


DRA_EVALUATOR = Selectors()


def _devices_allocated(claims: list[dict], names_: list[str]) -> dict[str, int]:
    """Devices allocated per claim of ``names_``; the claim made for the pod's extended
    resources as "extended"."""
    found = {}
    for c in claims:
        meta = c["metadata"]
        made = (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
        if made or meta["name"] in names_:
            results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            ) or []
            found["extended" if made else meta["name"]] = len(results)
    return found


def ask_dra(plane: Plane, case: Case) -> Answer:
    """The core first (on the claims as they are before anything allocates them), then
    kube-scheduler; both "may it go there" and how many devices each claim got."""
    with _staged(plane, case) as names_, _devices_staged(plane, case):
        nodes = _nodes(plane, names_)
        (asked,) = _as_ours([case.pending])
        snap = Snapshot(nodes=nodes, pods=(asked,), **_device_world(plane, case))
        result = schedule(snap, now=time.time())
        placed = {b.pod.name: b.node for g in result.bindings for b in g.bindings}
        claim_names = [e["name"] for e in case.pending["spec"]["resourceClaims"]]
        ours = placed.get("asked") == case.candidate
        our_devices = {
            "extended" if w.made_here else w.name: len(w.allocation.results) if w.allocation else 0
            for g in result.bindings
            for w in g.claims
        }
        said = [e.message for e in result.events if e.regarding.name == "asked"]
        our_message = (
            f"bound to {case.candidate} with devices {dict(sorted(our_devices.items()))}"
            if ours
            else (said[0] if said else "no event")
        )
        plane.rest.create(case.pending)
        kube, kube_message = _kube_answer(plane, case)
        if kube:
            claims = plane.rest.read("resourceclaims", namespace=case.namespace)["items"]
            kube_devices = _devices_allocated(claims, claim_names)
            kube_message += f" with devices {dict(sorted(kube_devices.items()))}"
            if ours and kube_devices != our_devices:
                return Answer(kube, kube_message, False, our_message + " (devices differ)")
        return Answer(kube, kube_message, ours, our_message)


def random_dra_gang_case(rng: random.Random, number: int) -> Case:
    """A gang of 2-8 members, each claiming 1-2 GPUs of its own and all sharing one claim
    for the channel of the rack's NVLink domain, on 2-4 nodes of one rack."""
    case = random_dra_case(random.Random(rng.random()), number)  # classes and naming
    ns, mark = case.namespace, {"oracle-case": str(number)}
    rack = f"o{number}-r"
    nodes = [
        node_manifest(FakeNode(f"o{number}-n{i}", {**mark, "rack": rack}), cpu="8", memory="8Gi")
        for i in range(rng.randint(2, 4))
    ]
    gpu_class, domain_class = f"o{number}-gpu", f"o{number}-domain"
    objects = [o for o in case.objects if o["kind"] == "DeviceClass"]
    for n in nodes:
        name = n["metadata"]["name"]
        objects.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "labels": mark},
            "spec": {"driver": GPU_DRIVER, "nodeName": name,
                     "devices": _gpu_devices(rng, rng.randint(1, 4), "d"),
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}},
        })  # fmt: skip
    objects.append({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"o{number}-channel", "labels": mark},
        "spec": {"driver": DOMAIN_DRIVER,
                 "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "rack", "operator": "In", "values": [rack]}]}]},
                 "pool": {"name": f"o{number}-channel", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "channel"}]},
    })  # fmt: skip
    objects.append(
        _claim("domain", ns, [{"name": "ch", "exactly": {"deviceClassName": domain_class}}])
    )
    size, count = rng.randint(2, 8), rng.randint(1, 2)
    members = []
    for i in range(size):
        own = _claim(
            f"m{i}-gpus",
            ns,
            [{"name": "g", "exactly": {"deviceClassName": gpu_class, "count": count}}],
        )
        objects.append(own)
        gang = {names.KOORD_NAME: "g", names.KOORD_MIN_AVAILABLE: str(size)}
        container = {
            **_container(random.Random(0), "100m"),
            "resources": {
                "requests": {"cpu": "100m"},
                "claims": [{"name": "domain"}, {"name": "gpus"}],
            },
        }
        members.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"m{i}", "namespace": ns, "annotations": gang},
            "spec": {"schedulerName": "default-scheduler", "nodeSelector": dict(mark),
                     "containers": [container],
                     "resourceClaims": [{"name": "domain", "resourceClaimName": "domain"},
                                        {"name": "gpus", "resourceClaimName": f"m{i}-gpus"}]},
        })  # fmt: skip
    return Case(number, nodes, [], members[0], "", ns, notes=[json.dumps(members)], objects=objects)


def ask_dra_gang(plane: Plane, case: Case) -> Answer:
    """kube-scheduler member by member; the core on the whole gang at once."""
    members = json.loads(case.notes[0])
    with _staged(plane, case) as names_, _devices_staged(plane, case):
        nodes = _nodes(plane, names_)
        snap = Snapshot(nodes=nodes, pods=_as_ours(members), **_device_world(plane, case))
        result = schedule(snap, now=time.time())
        ours = sum(len(g.bindings) for g in result.bindings) == len(members)
        return _gang_answer(plane, case, members, result, ours=ours)


@contextmanager
def _devices_staged(plane: Plane, case: Case) -> Iterator[None]:
    """The case's classes, slices and claims (and the claims' statuses); the cluster-wide
    ones removed afterwards (the claims go with the namespace)."""
    try:
        plane.rest.create(*case.objects)
        for name, status in case.statuses.items():
            plane.rest.patch_status("resourceclaims", name, status, namespace=case.namespace)
        yield
    finally:
        for kind in ("resourceslices", "deviceclasses"):
            plane.rest.remove(kind, labelSelector=f"oracle-case={case.number}")


# -- volumes (kube-scheduler's VolumeBinding, VolumeRestrictions, storage capacity) ---------

GI = "Gi"


def _pvc(name: str, namespace: str, storage_class: str, size: str, mode: str, **spec: Any) -> dict:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": [mode], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": size}}, **spec},
    }  # fmt: skip


def _local_pv(
    name: str, mark: str, storage_class: str, *, node: str, size: str, modes: list[str],
    **spec: Any,
) -> dict:  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"oracle-case": mark}},
        "spec": {"capacity": {"storage": size}, "accessModes": modes,
                 "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                 "local": {"path": f"/mnt/{name}"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": HOST, "operator": "In", "values": [node]}]}]}}, **spec},
    }  # fmt: skip


def random_volume_case(rng: random.Random, number: int) -> Case:
    """Nodes; storage classes (local volumes made by hand, volumes made by a provisioner
    where a pod goes, perhaps only in one zone or only where a CSI driver publishes room,
    and an Immediate class); local volumes; and a pod pinned to a candidate node whose
    claims are of each kind: waiting for their first consumer, bound to a volume on some
    node, missing, generic ephemeral (perhaps with its name taken by a claim made by hand),
    ReadWriteOncePod and perhaps used by another pod."""
    ns, mark = f"oracle-{number}", str(number)
    zones = [f"o{number}-z{i}" for i in range(2)]
    zone = "topology.kubernetes.io/zone"
    nodes = [
        node_manifest(FakeNode(f"o{number}-n{i}", {zone: rng.choice(zones)}), cpu="4", memory="8Gi")
        for i in range(rng.randint(1, 3))
    ]
    names_ = [n["metadata"]["name"] for n in nodes]
    candidate = rng.choice(names_)
    local, made, fixed = f"o{number}-local", f"o{number}-made", f"o{number}-fixed"
    capacity = rng.random() < 0.35
    driver = f"o{number}.csi.example.com" if capacity else PROVISIONER
    labels = {"oracle-case": mark}
    made_class: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": made, "labels": labels}, "provisioner": driver,
        "volumeBindingMode": "WaitForFirstConsumer",
    }  # fmt: skip
    if rng.random() < 0.25:
        made_class["allowedTopologies"] = [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": [rng.choice(zones)]}]}]  # fmt: skip
    objects: list[dict] = [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": local, "labels": labels},
         "provisioner": "kubernetes.io/no-provisioner",
         "volumeBindingMode": "WaitForFirstConsumer"},
        made_class,
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": fixed, "labels": labels},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"},
    ]  # fmt: skip
    if capacity:
        objects.append({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                        "metadata": {"name": driver, "labels": labels},
                        "spec": {"storageCapacity": True, "attachRequired": False}})  # fmt: skip
        for node_name in rng.sample(names_, rng.randint(0, len(names_))):
            held: dict[str, Any] = {
                "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                "metadata": {"name": f"cap-{node_name}", "namespace": ns},
                "storageClassName": made, "capacity": f"{rng.choice([1, 3, 10])}{GI}",
                "nodeTopology": {"matchLabels": {HOST: node_name}},
            }  # fmt: skip
            if rng.random() < 0.3:
                held["maximumVolumeSize"] = f"{rng.choice([1, 2])}{GI}"
            objects.append(held)
    for i in range(rng.randint(0, 3)):  # local volumes, free for claims of the local class
        modes = [rng.choice(["ReadWriteOnce", "ReadWriteOncePod"])]
        objects.append(_local_pv(f"o{number}-pv{i}", mark, local, node=rng.choice(names_),
                                 size=f"{rng.choice([1, 2, 4])}{GI}", modes=modes))  # fmt: skip
    volumes: list[dict] = []
    bound: list[dict] = []
    for v in range(rng.randint(1, 2)):
        kind = rng.choice(
            ["local"] * 4 + ["made"] * 4 + ["bound"] * 2 + ["ephemeral"] * 2 + ["missing", "taken"]
        )
        name = f"c{v}"
        mode = "ReadWriteOncePod" if rng.random() < 0.25 else "ReadWriteOnce"
        size = f"{rng.choice([1, 2])}{GI}"
        if kind == "taken":  # an ephemeral volume whose claim's name a claim made by hand has
            objects.append(_pvc(f"asked-{name}", ns, made, size, mode))
            kind = "ephemeral"
        if kind == "ephemeral":
            volumes.append({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": [mode], "storageClassName": made,
                "resources": {"requests": {"storage": size}}}}}})  # fmt: skip
            continue
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": name}})
        if kind == "missing":
            continue
        if kind == "bound":  # bound by the PV controller to a volume on some node
            pv = f"o{number}-bound{v}"
            ref = {"namespace": ns, "name": name}
            objects.append(_local_pv(pv, mark, fixed, node=rng.choice(names_), size=size,
                                     modes=[mode], claimRef=ref))  # fmt: skip
            objects.append(_pvc(name, ns, fixed, size, mode, volumeName=pv))
        else:
            objects.append(_pvc(name, ns, local if kind == "local" else made, size, mode))
        if mode == "ReadWriteOncePod" and kind != "bound" and rng.random() < 0.5:
            # Another pod uses it (bound by name: no scheduler sees it).
            bound.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"user{v}", "namespace": ns},
                "spec": {"nodeName": rng.choice(names_), "containers": [_container(rng, "100m")],
                         "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]},
            })  # fmt: skip
    pending = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "asked", "namespace": ns},
        "spec": {"schedulerName": "default-scheduler", "nodeSelector": {HOST: candidate},
                 "schedulingGates": [{"name": "example.com/oracle"}],
                 "containers": [_container(rng, "500m")], "volumes": volumes},
    }  # fmt: skip
    return Case(number, nodes, bound, pending, candidate, ns, objects=objects)


def _storage(plane: Plane, case: Case) -> dict[str, Any]:
    """Claims, volumes, classes and published capacity as the API server holds them."""
    selector = f"oracle-case={case.number}"

    def items(resource: str, **params: str) -> list[dict]:
        return plane.rest.read(resource, **params).get("items") or []

    claims = [claim_from_dict(c) for c in items("persistentvolumeclaims", namespace=case.namespace)]
    classes = [storage_class_from_dict(c) for c in items("storageclasses", labelSelector=selector)]
    drivers = [csi_driver_from_dict(d) for d in items("csidrivers", labelSelector=selector)]
    return {
        "claims": {c.key: c for c in claims},
        "volumes": {v.name: v for v in map(volume_from_dict, items("persistentvolumes",
                                                                 labelSelector=selector))},
        "storage_classes": dict(classes),
        "csi_drivers": {d.name: d for d in drivers},
        "storage_capacities": tuple(
            storage_capacity_from_dict(c)
            for c in items("csistoragecapacities", namespace=case.namespace)
        ),
    }  # fmt: skip


def _settled(plane: Plane, case: Case) -> None:
    """Until the PV controller has bound the claims made bound and marked every volume
    Available or Bound (a volume still Pending is no match for anyone), and the ephemeral
    volume controller has made the pod's ephemeral claims (a bounded wait: the case goes
    on)."""
    volumes = case.pending["spec"]["volumes"]
    wanted = {f"asked-{v['name']}" for v in volumes if "ephemeral" in v}
    fixed = {o["metadata"]["name"] for o in case.objects
             if o["kind"] == "PersistentVolumeClaim" and o["spec"].get("volumeName")}  # fmt: skip
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        claims = plane.rest.read("persistentvolumeclaims", namespace=case.namespace)["items"]
        seen = {c["metadata"]["name"]: c for c in claims}
        volumes = plane.rest.read("persistentvolumes", labelSelector=f"oracle-case={case.number}")
        if (
            wanted <= set(seen)
            and all((seen.get(n, {}).get("status") or {}).get("phase") == "Bound" for n in fixed)
            and all(
                (v.get("status") or {}).get("phase") in ("Available", "Bound")
                for v in volumes.get("items") or []
            )
        ):
            return
        time.sleep(0.1)


def _static_bindings(claims: list[dict]) -> dict[str, str]:
    """Which existing volume each claim of the local class got (by claim name)."""
    return {
        c["metadata"]["name"]: c["spec"].get("volumeName", "")
        for c in claims
        if c["spec"].get("storageClassName", "").endswith("-local")
    }


def ask_volumes(plane: Plane, case: Case) -> Answer:
    """The core first, on the claims as they are before anything binds them (the pod
    gated meanwhile, so that its ephemeral claims are made), then kube-scheduler; both
    "may it go there" and which local volume each claim got."""
    with _staged(plane, case) as names_:
        try:
            plane.rest.create(*case.objects, *case.bound, case.pending)
            _settled(plane, case)
            nodes = _nodes(plane, names_)
            users = tuple(pod_from_dict(plane.rest.read("pods", b["metadata"]["name"],
                                                       namespace=case.namespace))
                          for b in case.bound)  # fmt: skip
            raw = plane.rest.read("pods", "asked", namespace=case.namespace)
            asked = replace(pod_from_dict(raw), scheduler_name=OURS, gates=())
            snap = Snapshot(nodes=nodes, pods=(asked, *users), **_storage(plane, case))
            result = schedule(snap, now=time.time())
            placed = {b.pod.name: b.node for g in result.bindings for b in g.bindings}
            ours = placed.get("asked") == case.candidate
            our_volumes = {
                w.name: w.volume for g in result.bindings for w in g.volumes if not w.provisions
            }
            said = [e.message for e in result.events if e.regarding.name == "asked"]
            our_message = (
                f"bound to {case.candidate} with volumes {dict(sorted(our_volumes.items()))}"
                if ours
                else (said[0] if said else "no event")
            )
            with provisioning(plane.rest, case.namespace, {f"o{case.number}-made"}):
                _ungate(plane, case)
                kube, kube_message = _kube_answer(plane, case, ungated=True)
                if kube:
                    claims = plane.rest.read("persistentvolumeclaims",
                                             namespace=case.namespace)["items"]  # fmt: skip
                    kube_volumes = {
                        name: volume
                        for name, volume in _static_bindings(claims).items()
                        if name in our_volumes or volume
                    }
                    kube_message += f" with volumes {dict(sorted(kube_volumes.items()))}"
                    if ours and kube_volumes != {k: v for k, v in our_volumes.items()
                                                 if k in kube_volumes}:  # fmt: skip
                        return Answer(kube, kube_message, False, our_message + " (volumes differ)")
                elif not ours and reasons_of(kube_message) != reasons_of(our_message):
                    # Both say no: in the same words, node by node.
                    return Answer(kube, kube_message, True, our_message + " (reasons differ)")
            return Answer(kube, kube_message, ours, our_message)
        finally:
            for kind in ("storageclasses", "csidrivers", "persistentvolumes"):
                plane.rest.remove(kind, labelSelector=f"oracle-case={case.number}")


def reasons_of(message: str) -> frozenset[str]:
    """The reasons of a FailedScheduling message, counts and all ("1 node(s) didn't find
    ..."), kube-scheduler's (after "Unschedulable: ") or ours (after "<pod>: "), without
    what kube-scheduler says of preemption."""
    said = message.split("Unschedulable: ", 1)[-1].split("asked: ", 1)[-1]
    if "nodes are available: " in said:
        said = said.split("nodes are available: ", 1)[1]
    said = said.split(". ", 1)[0]  # the first sentence: what follows is of preemption
    return frozenset(r.strip().rstrip(".") for r in said.split(", ") if r.strip())


def _ungate(plane: Plane, case: Case) -> None:
    path = plane.rest.path("pods", namespace=case.namespace)
    answer = plane.rest.session.patch(
        f"{plane.rest.url}{path}/asked",
        json={"spec": {"schedulingGates": None}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=plane.rest.timeout,
    )
    answer.raise_for_status()


def run(
    plane: Plane,
    *,
    cases: int,
    seed: int,
    gangs: int = 0,
    dra: int = 0,
    volumes: int = 0,
    tally: Counter | None = None,
) -> list[tuple[Case, Answer]]:
    """Ask ``cases`` single-pod questions, ``gangs`` gang ones and ``dra`` ones about
    devices; the disagreements. ``tally`` counts kube-scheduler's answers by kind ("pod
    yes", "gang no", ...): a run where every answer is the same would prove little."""
    rng = random.Random(seed)
    disagreements = []
    tally = tally if tally is not None else Counter()
    for number in range(cases + gangs + dra + volumes):
        case_number = seed * 100_000 + number
        if number >= cases + gangs + dra:
            kind = "volumes"
            case = random_volume_case(rng, case_number)
            answer = ask_volumes(plane, case)
        elif number < cases:
            kind = "pod"
            case = random_case(rng, case_number)
            answer = ask(plane, case)
        elif number < cases + gangs:
            kind = "gang"
            case = random_gang_case(rng, case_number)
            answer = ask_gang(plane, case)
        elif (number - cases - gangs) % 4 != 3:
            case = random_dra_case(rng, case_number)
            # GPUs asked by resource name (KEP-5004) counted apart: the tally shows them.
            (main,) = case.pending["spec"]["containers"]
            by_name = any("gpu" in r for r in main["resources"]["requests"])
            kind = "dra by name" if by_name else "dra"
            answer = ask_dra(plane, case)
        else:  # every fourth device case: a gang sharing an NVLink domain's claim
            kind = "dra gang"
            case = random_dra_gang_case(rng, case_number)
            answer = ask_dra_gang(plane, case)
        tally[f"{kind} {'yes' if answer.kube else 'no'}"] += 1
        if not answer.agree:
            disagreements.append((case, answer))
    return disagreements


def describe(case: Case, answer: Answer) -> str:
    return (
        f"case {case.number}: kube-scheduler says {'yes' if answer.kube else 'no'} "
        f"({answer.kube_message}); we say {'yes' if answer.ours else 'no'} "
        f"({answer.our_message}); candidate {case.candidate}\n{case.yaml()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--gangs", type=int, default=40, help="gang cases besides")
    parser.add_argument("--dra", type=int, default=100, help="device (DRA) cases besides")
    parser.add_argument("--volumes", type=int, default=0, help="volume cases besides")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tally: Counter = Counter()
    with oracle_plane() as plane:
        found = run(
            plane,
            cases=args.cases,
            seed=args.seed,
            gangs=args.gangs,
            dra=args.dra,
            volumes=args.volumes,
            tally=tally,
        )
    for case, answer in found:
        print(describe(case, answer))
    print(
        f"{args.cases} pod cases, {args.gangs} gang cases, {args.dra} device cases and "
        f"{args.volumes} volume cases, "
        f"{len(found)} disagreements, "
        f"{time.monotonic() - started:.0f}s; kube-scheduler's answers: "
        f"{dict(sorted(tally.items()))}"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
