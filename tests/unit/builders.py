"""Manifests as the API server would send them, turned into model objects by the codecs.

Tests describe clusters the way users write YAML; going through the real codecs keeps the
tests honest about what the scheduler actually reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.codecs.podgroups import podgroup_from_dict
from scheduler.codecs.topology import group_from_configmap, topology_from_configmap
from scheduler.model import names
from scheduler.model.gangs import PodGroup
from scheduler.model.nodes import Node
from scheduler.model.pods import GangKey, Pod
from scheduler.model.snapshot import GangState, PriorityClass, Snapshot
from scheduler.model.times import format_time
from scheduler.model.topology import SakkaraGroup, Topology

SCHEDULER = "gang-scheduler"
T0 = 1_800_000_000.0  # a fixed "now" for tests


def node_manifest(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    gpu: int = 0,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node(name: str, **kw: Any) -> Node:
    return node_from_dict(node_manifest(name, **kw))


def pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: int = 0,
    gang: str | None = None,
    min_available: int | None = None,
    total: int | None = None,
    mode: str | None = None,
    groups: list[str] | None = None,
    waiting_time: str | None = None,
    pod_group: str | None = None,
    scheduler: str = SCHEDULER,
    node_name: str = "",
    phase: str = "Pending",
    priority: int | None = None,
    created: float = T0 - 100,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Mapping[str, str]] = (),
    annotations: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    owner: str | None = None,
) -> Pod:
    """A pod; ``gang`` uses Koordinator annotations, ``pod_group`` the PodGroup label;
    ``spec`` adds fields to the pod spec (its ``affinity`` is merged with node ``affinity``);
    ``owner``: the ReplicaSet that controls it, by name."""
    notes = dict(annotations or {})
    labels = dict(labels or {})
    if gang is not None:
        notes[names.KOORD_NAME] = gang
    if min_available is not None:
        notes[names.KOORD_MIN_AVAILABLE] = str(min_available)
    if total is not None:
        notes[names.KOORD_TOTAL_NUMBER] = str(total)
    if mode is not None:
        notes[names.KOORD_MODE] = mode
    if groups is not None:
        notes[names.KOORD_GROUPS] = json.dumps(groups)
    if waiting_time is not None:
        notes[names.KOORD_WAITING_TIME] = waiting_time
    if pod_group is not None:
        labels[names.POD_GROUP_LABEL] = pod_group
    requests = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    extra = dict(spec or {})
    spec = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "resources": {"requests": requests}}],
        "nodeSelector": dict(node_selector or {}),
        "tolerations": list(tolerations),
    }
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    if affinity is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
        }
    extra["affinity"] = {**spec.get("affinity", {}), **extra.get("affinity", {})}
    spec = {**spec, **{k: v for k, v in extra.items() if v}}
    return pod_from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": labels,
                "annotations": notes,
                "creationTimestamp": format_time(created),
                **({"ownerReferences": [_controller(owner)]} if owner else {}),
            },
            "spec": spec,
            "status": {"phase": phase},
        }
    )


def _controller(owner: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": owner,
        "uid": f"uid-rs-{owner}",
        "controller": True,
    }


def podgroup(
    name: str,
    *,
    namespace: str = "default",
    min_member: int = 1,
    timeout: int | None = None,
    min_resources: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    status: Mapping[str, Any] | None = None,
    created: float = T0 - 200,
) -> PodGroup:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    if min_resources is not None:
        spec["minResources"] = dict(min_resources)
    return podgroup_from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"pg-uid-{name}",
                "annotations": dict(annotations or {}),
                "creationTimestamp": format_time(created),
            },
            "spec": spec,
            "status": dict(status or {}),
        }
    )


def snapshot(
    nodes: Iterable[Node],
    pods: Iterable[Pod],
    *,
    podgroups: Iterable[PodGroup] = (),
    memory: Mapping[GangKey, GangState] | None = None,
    priority_classes: Iterable[PriorityClass] = (),
    topology: Topology | None = None,
    topology_errors: tuple[str, ...] = (),
    groups: Iterable[SakkaraGroup] = (),
) -> Snapshot:
    return Snapshot(
        nodes={n.name: n for n in nodes},
        pods=tuple(pods),
        podgroups={pg.key: pg for pg in podgroups},
        priority_classes={pc.name: pc for pc in priority_classes},
        memory=dict(memory or {}),
        topology=topology,
        topology_errors=topology_errors,
        groups={GangKey(g.namespace, g.name): g for g in groups},
    )


def group(
    name: str, *, size: int, constraints: str = "", priority: int = 0, namespace: str = "default"
) -> SakkaraGroup:
    """A Sakkara group ConfigMap as seed 004 writes it."""
    data = {"name": name, "size": str(size), "priority": str(priority)}
    if constraints:
        data["constraints"] = constraints
    return group_from_configmap(
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {"sakkara.group": ""}},
            "data": data,
        }
    )


def tree_topology(tree: Mapping[str, Any], levels: tuple[str, ...]) -> Topology:
    """A topology from seed 004's tree, through the real ConfigMap reader."""
    parsed, errors = topology_from_configmap(
        {"level-names": json.dumps(list(levels)), "tree": json.dumps(tree)}
    )
    assert parsed is not None, errors
    return parsed


def gang_pods(prefix: str, count: int, **kw: Any) -> list[Pod]:
    return [pod(f"{prefix}-{i}", **kw) for i in range(count)]
