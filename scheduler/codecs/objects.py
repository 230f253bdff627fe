"""Kubernetes objects (plain dicts, as the API server sends them) to model objects.

Requests are computed the way kube-scheduler computes them, so that our bookkeeping and the
kubelet's admission agree: app containers summed, init containers as a peak (sidecars, i.e.
restartable init containers, add to everything after them), pod overhead on top, pod-level
resources where set, and one ``pods`` slot per pod.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from scheduler.codecs.gangs import read_claim, read_options
from scheduler.model import names
from scheduler.model.gangs import Condition, PodGroup, PodGroupStatus
from scheduler.model.nodes import Node, Taint
from scheduler.model.pods import (
    GangKey,
    NodeSelectorTerm,
    Pod,
    PodRef,
    Requirement,
    Toleration,
)
from scheduler.model.resources import CPU, PODS, Resources
from scheduler.model.snapshot import PriorityClass
from scheduler.model.times import parse_time

Obj = Mapping[str, Any]


def quantity(name: str, raw: object) -> int:
    """A quantity in our integer base units: cpu in millicores, the rest rounded up."""
    value: Decimal = parse_quantity(raw)
    if name == CPU:
        value *= 1000
    return math.ceil(value)


def resource_list(raw: Mapping[str, object] | None) -> Resources:
    """A ResourceList; entries that do not parse are left out (the API server validates)."""
    amounts: dict[str, int] = {}
    for name, value in (raw or {}).items():
        try:
            amounts[name] = quantity(name, value)
        except ValueError:
            continue
    return Resources(amounts)


def _requests(container: Obj) -> dict[str, int]:
    return dict(resource_list((container.get("resources") or {}).get("requests")))


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _peak(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(spec: Obj) -> Resources:
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _add(total, _requests(container))
    sidecars: dict[str, int] = {}
    for init in spec.get("initContainers") or ():
        requests = _requests(init)
        if init.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
        else:
            running = dict(sidecars)
            _add(running, requests)
            _peak(total, running)
    pod_level = resource_list((spec.get("resources") or {}).get("requests"))
    total.update(pod_level)
    _add(total, resource_list(spec.get("overhead")))
    total[PODS] = total.get(PODS, 0) + 1
    return Resources(total)


def _requirements(raw: Iterable[Obj] | None) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            key=r.get("key", ""),
            operator=r.get("operator", "In"),
            values=tuple(str(v) for v in r.get("values") or ()),
        )
        for r in raw or ()
    )


def _affinity(spec: Obj) -> tuple[NodeSelectorTerm, ...]:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return tuple(
        NodeSelectorTerm(
            match_expressions=_requirements(term.get("matchExpressions")),
            match_fields=_requirements(term.get("matchFields")),
        )
        for term in required.get("nodeSelectorTerms") or ()
    )


def _tolerations(spec: Obj) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=str(t.get("value", "")),
            effect=t.get("effect", ""),
        )
        for t in spec.get("tolerations") or ()
    )


def pod_from_dict(obj: Obj) -> Pod:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    namespace = meta.get("namespace", "default")
    return Pod(
        ref=PodRef(namespace, meta.get("name", ""), meta.get("uid", "")),
        requests=pod_requests(spec),
        scheduler_name=spec.get("schedulerName", "default-scheduler"),
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase") or "Pending",
        priority=spec.get("priority"),
        priority_class=spec.get("priorityClassName") or "",
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity=_affinity(spec),
        tolerations=_tolerations(spec),
        labels=labels,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        deleting=bool(meta.get("deletionTimestamp")),
        gang=read_claim(labels, annotations, namespace=namespace),
        timed_out=str(annotations.get(names.KOORD_TIMEOUT, "")).lower() == "true",
        first_attempt=parse_time(str(annotations.get(names.FIRST_ATTEMPT, "")) or None),
    )


def node_from_dict(obj: Obj) -> Node:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return Node(
        name=meta.get("name", ""),
        allocatable=resource_list(status.get("allocatable") or status.get("capacity")),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(
            Taint(key=t.get("key", ""), value=str(t.get("value", "")), effect=t.get("effect", ""))
            for t in spec.get("taints") or ()
        ),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
    )


def _int(raw: object, default: int = 0) -> int:
    try:
        return int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default


def _status(raw: Obj) -> PodGroupStatus:
    return PodGroupStatus(
        phase=raw.get("phase") or "",
        scheduled=_int(raw.get("scheduled")),
        running=_int(raw.get("running")),
        succeeded=_int(raw.get("succeeded")),
        failed=_int(raw.get("failed")),
        schedule_start_time=raw.get("scheduleStartTime") or "",
        occupied_by=raw.get("occupiedBy") or "",
        conditions=tuple(
            Condition(
                type=c.get("type", ""),
                status=c.get("status", "Unknown"),
                reason=c.get("reason", ""),
                message=c.get("message", ""),
                last_transition=c.get("lastTransitionTime", ""),
            )
            for c in raw.get("conditions") or ()
        ),
    )


def podgroup_from_dict(obj: Obj) -> PodGroup:
    """A PodGroup; Koordinator annotations on it (mode, total-number, groups) are folded in."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    namespace = meta.get("namespace", "default")
    options = read_options(meta.get("annotations") or {}, namespace=namespace)
    timeout = spec.get("scheduleTimeoutSeconds")
    min_resources = spec.get("minResources")
    return PodGroup(
        key=GangKey(namespace, meta.get("name", "")),
        uid=meta.get("uid", ""),
        min_member=max(_int(spec.get("minMember"), 1), 1),
        min_resources=resource_list(min_resources) if min_resources else None,
        timeout_seconds=float(timeout) if timeout else None,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        mode=options.mode,
        total_number=options.total_number,
        groups=options.groups,
        constraints=options.constraints,
        status=_status(obj.get("status") or {}),
        errors=options.errors,
    )


def priority_class_from_dict(obj: Obj) -> PriorityClass:
    return PriorityClass(
        name=(obj.get("metadata") or {}).get("name", ""),
        value=_int(obj.get("value")),
        global_default=bool(obj.get("globalDefault")),
    )


def podgroup_status_to_dict(status: PodGroupStatus) -> dict[str, Any]:
    """The status subresource body: every field, so a merge patch replaces it whole."""
    body: dict[str, Any] = {
        "phase": status.phase,
        "scheduled": status.scheduled,
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "conditions": [
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": c.last_transition,
            }
            for c in status.conditions
        ],
    }
    if status.schedule_start_time:
        body["scheduleStartTime"] = status.schedule_start_time
    if status.occupied_by:
        body["occupiedBy"] = status.occupied_by
    return body
