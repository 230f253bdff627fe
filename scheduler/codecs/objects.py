"""Kubernetes objects (plain dicts, as the API server sends them) to model objects.

Requests are computed the way kube-scheduler computes them, so that our bookkeeping and the
kubelet's admission agree: app containers summed, init containers as a peak (sidecars, i.e.
restartable init containers, add to everything after them), pod overhead on top, pod-level
resources where set, and one ``pods`` slot per pod. PodGroups of every kind are read in
``codecs.podgroups``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scheduler.codecs.devices import container_asks, extended_claim, pod_claims
from scheduler.codecs.gangs import claim_of
from scheduler.codecs.owners import controlling_job, read_owner_claim
from scheduler.codecs.quantities import QUANTITY_RULE, quantity
from scheduler.codecs.selectors import (
    label_selector,
    node_selector_terms,
    requirements,
    tolerations,
)
from scheduler.codecs.shapes import integer, listed, obj, objs, text, texts, whole
from scheduler.model import names
from scheduler.model.budgets import DisruptionBudget
from scheduler.model.decisions import PREEMPTED_BY_SCHEDULER, STALE_GANG
from scheduler.model.nodes import Node, Taint
from scheduler.model.pods import (
    TERMINAL_PHASES,
    Disruption,
    GangClaim,
    GangSource,
    HostPort,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    PodRef,
    SpreadConstraint,
)
from scheduler.model.resources import PODS, Resources
from scheduler.model.snapshot import PriorityClass
from scheduler.model.times import parse_time

Obj = Mapping[str, Any]


def resource_list(raw: object) -> Resources:
    """A ResourceList; entries that do not parse are left out (the API server validates)."""
    return Resources(_amounts(raw))


def _amounts(raw: object) -> dict[str, int]:
    """A ResourceList as a plain dict (zeros kept): a pod's containers are summed in these
    and one ``Resources`` made at the end. A ``Resources`` (and its hash) for every
    container, the pod level and the overhead made ``pod_requests`` 2.8x as long (16 µs of
    the 70 a pod took to decode, ``python -m bench.decode``)."""
    amounts: dict[str, int] = {}
    for name, value in obj(raw).items():
        try:
            amounts[name] = quantity(name, value)
        except ValueError:
            continue
    return amounts


def resource_errors(raw: object, field: str) -> list[str]:
    """What ``resource_list`` left out of a ResourceList the API server does not check
    fully (a PodGroup's minResources: the CRD's pattern takes "-5" and "1e999")."""
    if raw is not None and not isinstance(raw, Mapping):
        return [f"{field} must be a map of resource names to quantities, got {raw!r}"]
    errors = []
    for name, value in obj(raw).items():
        try:
            quantity(name, value)
        except ValueError:
            errors.append(f"{field}.{name} must be {QUANTITY_RULE}, got {value!r}")
    return errors


def _requests(container: Obj) -> dict[str, int]:
    return _amounts(obj(container.get("resources")).get("requests"))


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _peak(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(spec: Obj) -> Resources:
    total: dict[str, int] = {}
    for container in objs(spec.get("containers")):
        _add(total, _requests(container))
    sidecars: dict[str, int] = {}
    for init in objs(spec.get("initContainers")):
        requests = _requests(init)
        if init.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
        else:
            running = dict(sidecars)
            _add(running, requests)
            _peak(total, running)
    pod_level = obj(spec.get("resources")).get("requests")
    if pod_level:  # what the pod as a whole requests, where it says (a zero says nothing)
        total.update((name, amount) for name, amount in _amounts(pod_level).items() if amount)
    if overhead := spec.get("overhead"):
        _add(total, _amounts(overhead))
    total[PODS] = total.get(PODS, 0) + 1
    return Resources(total)


def _affinity(spec: Obj) -> tuple[NodeSelectorTerm, ...]:
    return node_selector_terms(
        obj(obj(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )


def _claims(name: str, spec: Obj) -> tuple[str, ...]:
    """The claims a pod's volumes name: persistentVolumeClaim ones by their claimName,
    generic ephemeral ones by the name their controller gives them (<pod>-<volume>)."""
    claims = []
    for volume in objs(spec.get("volumes")):
        claim = text(obj(volume.get("persistentVolumeClaim")).get("claimName"))
        if claim:
            claims.append(claim)
        elif isinstance(volume.get("ephemeral"), Mapping):
            claims.append(f"{name}-{text(volume.get('name'))}")
    return tuple(claims)


def _ephemeral_claims(name: str, spec: Obj) -> frozenset[str]:
    return frozenset(
        f"{name}-{text(volume.get('name'))}"
        for volume in objs(spec.get("volumes"))
        if not text(obj(volume.get("persistentVolumeClaim")).get("claimName"))
        and isinstance(volume.get("ephemeral"), Mapping)
    )


def _pod_affinity_terms(raw: object, namespace: str) -> tuple[PodAffinityTerm, ...]:
    terms = []
    for term in objs(raw):
        namespaces = frozenset(n for n in listed(term.get("namespaces")) if isinstance(n, str))
        selector = term.get("namespaceSelector")
        if not namespaces and selector is None:
            namespaces = frozenset({namespace})
        terms.append(
            PodAffinityTerm(
                selector=label_selector(term.get("labelSelector")),
                topology_key=text(term.get("topologyKey")),
                namespaces=namespaces,
                namespace_selector=label_selector(selector),
            )
        )
    return tuple(terms)


def _required(affinity: Obj, kind: str, namespace: str) -> tuple[PodAffinityTerm, ...]:
    required = obj(affinity.get(kind)).get("requiredDuringSchedulingIgnoredDuringExecution")
    return _pod_affinity_terms(required, namespace)


def _spread(spec: Obj) -> tuple[SpreadConstraint, ...]:
    """topologySpreadConstraints, with kube-scheduler's defaults (minDomains 1, node
    affinity honoured, taints ignored). The API server has validated them."""
    constraints = []
    for c in objs(spec.get("topologySpreadConstraints")):
        max_skew = whole(c.get("maxSkew"))
        min_domains = whole(c.get("minDomains"))
        constraints.append(
            SpreadConstraint(
                max_skew=max_skew if max_skew is not None and max_skew > 0 else 1,
                topology_key=text(c.get("topologyKey")),
                hard=text(c.get("whenUnsatisfiable"), "DoNotSchedule") == "DoNotSchedule",
                selector=label_selector(c.get("labelSelector")),
                min_domains=min_domains if min_domains is not None and min_domains > 0 else 1,
                honor_node_affinity=text(c.get("nodeAffinityPolicy"), "Honor") == "Honor",
                honor_node_taints=text(c.get("nodeTaintsPolicy"), "Ignore") == "Honor",
                match_label_keys=tuple(
                    k for k in listed(c.get("matchLabelKeys")) if isinstance(k, str)
                ),
            )
        )
    return tuple(constraints)


def _weight(raw: object) -> int | None:
    weight = whole(raw)
    return weight if weight is not None and 1 <= weight <= 100 else None


def _preferred_node_affinity(affinity: Obj) -> tuple[tuple[int, NodeSelectorTerm], ...]:
    preferred = obj(affinity.get("nodeAffinity")).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    terms = []
    for entry in objs(preferred):
        weight = _weight(entry.get("weight"))
        preference = obj(entry.get("preference"))
        if weight is not None:
            term = NodeSelectorTerm(
                match_expressions=requirements(preference.get("matchExpressions")),
                match_fields=requirements(preference.get("matchFields")),
            )
            terms.append((weight, term))
    return tuple(terms)


def _preferred(affinity: Obj, kind: str, namespace: str) -> tuple[tuple[int, PodAffinityTerm], ...]:
    preferred = obj(affinity.get(kind)).get("preferredDuringSchedulingIgnoredDuringExecution")
    entries = [
        e
        for e in objs(preferred)
        if _weight(e.get("weight")) is not None and isinstance(e.get("podAffinityTerm"), Mapping)
    ]
    terms = _pod_affinity_terms([e.get("podAffinityTerm") for e in entries], namespace)
    return tuple((_weight(e.get("weight")) or 1, t) for e, t in zip(entries, terms, strict=True))


def host_ports(spec: Obj) -> tuple[HostPort, ...]:
    """The ports with a hostPort of the app containers and of the init containers that run
    as long as the pod (sidecars), as kube-scheduler's ``GetHostPorts`` collects them."""
    containers = [
        *(c for c in objs(spec.get("initContainers")) if c.get("restartPolicy") == "Always"),
        *objs(spec.get("containers")),
    ]
    ports = []
    for container in containers:
        for port in objs(container.get("ports")):
            number = whole(port.get("hostPort"))
            if number is None or number <= 0:
                continue
            ports.append(
                HostPort(
                    port=number,
                    protocol=text(port.get("protocol")) or "TCP",
                    ip=text(port.get("hostIP")) or "0.0.0.0",
                )
            )
    return tuple(ports)


DISRUPTED_BY_SCHEDULER = frozenset({PREEMPTED_BY_SCHEDULER, STALE_GANG})
# What a mark's message says after the scheduler's name when the pod's gang goes whole.
WHOLE_GANG_MARK = "[whole gang] "


def _disrupted(status: Obj) -> Disruption | None:
    """The pod's mark for eviction by a scheduler, if any: its DisruptionTarget condition,
    whose message begins with the scheduler's name (``NAME: ...``, as kube-scheduler's)."""
    for c in objs(status.get("conditions")):
        if (
            c.get("type") == "DisruptionTarget"
            and text(c.get("status")) == "True"
            and text(c.get("reason")) in DISRUPTED_BY_SCHEDULER
        ):
            by, colon, said = text(c.get("message")).partition(": ")
            return Disruption(
                text(c.get("reason")),
                by if colon else "",
                parse_time(c.get("lastTransitionTime")) or 0.0,
                whole_gang=bool(colon) and said.startswith(WHOLE_GANG_MARK),
            )
    return None


def _pod_scheduled(status: Obj) -> tuple[str, str, str, str] | None:
    for c in objs(status.get("conditions")):
        if c.get("type") == "PodScheduled":
            return (
                text(c.get("status")),
                text(c.get("reason")),
                text(c.get("message")),
                text(c.get("lastTransitionTime")),
            )
    return None


# Every reader below takes any JSON value: one of the wrong type counts as absent (see
# ``shapes``), so a parsed object never carries a type the core does not expect.


def queue_named(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The queue an object names: Volcano's annotation, KubeRay's and Volcano's job
    label, or ours; "" when it names none (the default queue)."""
    return (
        annotations.get(names.VOLCANO_QUEUE_NAME)
        or labels.get(names.VOLCANO_QUEUE_LABEL)
        or labels.get(names.QUEUE)
        or ""
    )


def pod_gang(
    meta: Obj,
    spec: Obj,
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    namespace: str,
) -> GangClaim | None:
    """The gang a pod declares, else the one its owner makes of it (``labels`` and
    ``annotations``: the pod's, as ``texts`` read them). A pod in a PodGroup by its
    ``spec.schedulingGroup`` alone carries its owner's gang too, for where that PodGroup is
    the owner's default (see GangClaim.fallback)."""
    claim = claim_of(
        labels, annotations, namespace=namespace, scheduling_group=spec.get("schedulingGroup")
    )
    if claim is not None and claim.source is not GangSource.WORKLOAD:
        return claim
    refs = meta.get("ownerReferences")
    owner = read_owner_claim(labels, annotations, refs, namespace=namespace) if refs else None
    if claim is None or owner is None:
        return claim or owner
    return replace(claim, fallback=owner)


def _run_of(status: Mapping[str, Any]) -> dict[str, float | None]:
    """A pod's start (status.startTime, once the kubelet took it) and, once it finished,
    its end: the last of its containers' terminated.finishedAt."""
    started = parse_time(status.get("startTime"))
    if text(status.get("phase")) not in TERMINAL_PHASES:
        return {"started": started}
    ends = [
        parse_time(obj(obj(obj(c).get("state")).get("terminated")).get("finishedAt"))
        for c in objs(status.get("containerStatuses"))
    ]
    known = [end for end in ends if end is not None]
    return {
        "started": started,
        "finished": max(known) if known and len(known) == len(ends) else None,
    }


def pod_from_dict(raw: object) -> Pod:
    body = obj(raw)
    meta, spec, status = obj(body.get("metadata")), obj(body.get("spec")), obj(body.get("status"))
    labels = texts(meta.get("labels"))
    annotations = texts(meta.get("annotations"))
    namespace = text(meta.get("namespace"), "default")
    affinity = obj(spec.get("affinity"))  # most pods have none: skip its six readings
    job, job_uid = controlling_job(refs) if (refs := meta.get("ownerReferences")) else ("", "")
    # Only a bound pod's: a pending pod's names a claim of an attempt that did not bind
    # (taken back; the next attempt makes one anew, as kube-scheduler does).
    made, served = (
        extended_claim(status)
        if status.get("extendedResourceClaimStatus") and spec.get("nodeName")
        else (None, ())
    )
    return Pod(
        ref=PodRef(namespace, text(meta.get("name")), text(meta.get("uid"))),
        # Extended resources a claim the scheduler made serves are devices of that claim:
        # counted there, not again as the pod's requests.
        requests=pod_requests(spec).without(served) if made else pod_requests(spec),
        scheduler_name=text(spec.get("schedulerName"), "default-scheduler"),
        node_name=text(spec.get("nodeName")),
        phase=text(status.get("phase")) or "Pending",
        priority=whole(spec.get("priority")),
        deadline_seconds=whole(spec.get("activeDeadlineSeconds")),
        **_run_of(status),
        preempts=text(spec.get("preemptionPolicy")) != "Never",
        nominated_node=text(status.get("nominatedNodeName")),
        priority_class=text(spec.get("priorityClassName")),
        node_selector=texts(spec.get("nodeSelector")),
        affinity=_affinity(spec) if affinity else (),
        tolerations=tolerations(spec.get("tolerations")),
        labels=labels,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        deleting=bool(meta.get("deletionTimestamp")),
        gang=pod_gang(meta, spec, labels=labels, annotations=annotations, namespace=namespace),
        job=job,
        job_uid=job_uid,
        timed_out=annotations.get(names.KOORD_TIMEOUT, "").lower() == "true",
        first_attempt=parse_time(annotations.get(names.FIRST_ATTEMPT)),
        expected_start=text(annotations.get(names.EXPECTED_START)),
        bound_by=text(annotations.get(names.BOUND_BY)),
        scheduled_condition=_pod_scheduled(status),
        pod_affinity=_required(affinity, "podAffinity", namespace) if affinity else (),
        pod_anti_affinity=_required(affinity, "podAntiAffinity", namespace) if affinity else (),
        host_ports=host_ports(spec),
        spread=_spread(spec),
        claims=_claims(text(meta.get("name")), spec),
        ephemeral_claims=_ephemeral_claims(text(meta.get("name")), spec),
        preferred_affinity=_preferred_node_affinity(affinity) if affinity else (),
        preferred_pod_affinity=_preferred(affinity, "podAffinity", namespace) if affinity else (),
        preferred_pod_anti_affinity=_preferred(affinity, "podAntiAffinity", namespace)
        if affinity
        else (),
        scoring=s if (s := annotations.get(names.SCORING, "")) in names.SCORINGS else "",
        resource_claims=(*pod_claims(spec, status), *((made,) if made else ()))
        if spec.get("resourceClaims") or made
        else (),
        extended=container_asks(spec, _amounts) if not made else (),
        gates=tuple(text(g.get("name")) or "(unnamed)" for g in objs(spec.get("schedulingGates"))),
        queue=queue_named(labels, annotations),
        disrupted=_disrupted(status) if status.get("conditions") else None,
        movable=annotations.get(names.MOVABLE, "").lower() == "true"
        and any(r.get("controller") is True for r in objs(meta.get("ownerReferences"))),
    )


def node_from_dict(raw: object) -> Node:
    body = obj(raw)
    meta, spec, status = obj(body.get("metadata")), obj(body.get("spec")), obj(body.get("status"))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in objs(status.get("conditions"))
    )
    return Node(
        name=text(meta.get("name")),
        allocatable=resource_list(status.get("allocatable") or status.get("capacity")),
        labels=texts(meta.get("labels")),
        taints=tuple(
            Taint(key=text(t.get("key")), value=text(t.get("value")), effect=text(t.get("effect")))
            for t in objs(spec.get("taints"))
        ),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
    )


def budget_from_dict(raw: object) -> DisruptionBudget:
    """A PodDisruptionBudget (policy/v1): its selector and what its status allows. A status
    not written yet (no disruption controller has seen it) allows nothing, as kube-scheduler
    reads it."""
    body = obj(raw)
    meta, spec, status = obj(body.get("metadata")), obj(body.get("spec")), obj(body.get("status"))
    allowed = whole(status.get("disruptionsAllowed"))
    return DisruptionBudget(
        namespace=text(meta.get("namespace"), "default"),
        name=text(meta.get("name")),
        selector=label_selector(spec.get("selector")),
        disruptions_allowed=max(allowed, 0) if allowed is not None else 0,
        disrupted=frozenset(texts(status.get("disruptedPods"))),
    )


def namespace_from_dict(raw: object) -> tuple[str, dict[str, str]]:
    """A namespace's name and labels."""
    meta = obj(obj(raw).get("metadata"))
    return text(meta.get("name")), texts(meta.get("labels"))


def priority_class_from_dict(raw: object) -> PriorityClass:
    body = obj(raw)
    return PriorityClass(
        name=text(obj(body.get("metadata")).get("name")),
        value=integer(body.get("value")),
        global_default=bool(body.get("globalDefault")),
    )
