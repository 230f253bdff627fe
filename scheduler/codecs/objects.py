"""Kubernetes objects (plain dicts, as the API server sends them) to model objects.

Requests are computed the way kube-scheduler computes them, so that our bookkeeping and the
kubelet's admission agree: app containers summed, init containers as a peak (sidecars, i.e.
restartable init containers, add to everything after them), pod overhead on top, pod-level
resources where set, and one ``pods`` slot per pod.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scheduler.codecs.devices import container_asks, extended_claim, pod_claims
from scheduler.codecs.gangs import claim_of, is_subdomain, read_options
from scheduler.codecs.owners import controlling_job, read_owner_claim
from scheduler.codecs.quantities import QUANTITY_RULE, quantity
from scheduler.codecs.selectors import (
    label_key_error,
    label_selector,
    node_selector_terms,
    requirements,
    tolerations,
)
from scheduler.codecs.shapes import MAX_COUNT, listed, obj, objs, text, texts, whole
from scheduler.codecs.subgroups import network_topology, subgroup_policy
from scheduler.model import names
from scheduler.model.budgets import DisruptionBudget
from scheduler.model.decisions import PREEMPTED_BY_SCHEDULER, STALE_GANG
from scheduler.model.gangs import (
    CompositePodGroup,
    Condition,
    PodGroup,
    PodGroupStatus,
    clip_message,
)
from scheduler.model.nodes import Node, Taint
from scheduler.model.pods import (
    TERMINAL_PHASES,
    Disruption,
    GangClaim,
    GangKey,
    GangOptions,
    HostPort,
    NetworkTopology,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    PodClaim,
    PodGroupApi,
    PodRef,
    SpreadConstraint,
)
from scheduler.model.queues import DEFAULT_QUEUE
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
    ``annotations``: the pod's, as ``texts`` read them)."""
    return claim_of(
        labels, annotations, namespace=namespace, scheduling_group=spec.get("schedulingGroup")
    ) or (
        read_owner_claim(labels, annotations, refs, namespace=namespace)
        if (refs := meta.get("ownerReferences"))
        else None
    )


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


def _int(raw: object, default: int = 0) -> int:
    """A count (the API server has checked it is an integer), else ``default``. ``int()``
    raises OverflowError for an infinite float, besides TypeError and ValueError."""
    if isinstance(raw, bool):
        return default
    try:
        return int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return default


def _status(raw: Obj) -> PodGroupStatus:
    return PodGroupStatus(
        phase=text(raw.get("phase")),
        scheduled=_int(raw.get("scheduled")),
        running=_int(raw.get("running")),
        succeeded=_int(raw.get("succeeded")),
        failed=_int(raw.get("failed")),
        schedule_start_time=text(raw.get("scheduleStartTime")),
        occupied_by=text(raw.get("occupiedBy")),
        conditions=tuple(
            Condition(
                type=text(c.get("type")),
                status=text(c.get("status"), "Unknown"),
                reason=text(c.get("reason")),
                message=text(c.get("message")),
                last_transition=text(c.get("lastTransitionTime")),
                observed_generation=_int(c.get("observedGeneration")),
            )
            for c in objs(raw.get("conditions"))
        ),
    )


def _timeout(raw: object, errors: list[str]) -> float | None:
    """spec.scheduleTimeoutSeconds: a finite number of seconds, at least 0. The CRD says an
    integer of at least 0, but ``float()`` alone raised on "abc", a list or 10**400 and let
    nan and inf through (a deadline that never falls due)."""
    if raw is None or raw == 0:
        return None  # absent, or 0: the scheduler's default (as before)
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            seconds = float(raw)
        except OverflowError:  # an int beyond a float's range
            seconds = math.inf
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    errors.append(
        "spec.scheduleTimeoutSeconds must be a whole number of seconds, at least 0 "
        f"(absent or 0: the scheduler's default), got {raw!r}"
    )
    return None


def _stated_options(options: GangOptions) -> dict[str, Any]:
    """What our and Koordinator's annotations on a PodGroup of any kind say of its gang."""
    return {
        "mode": options.mode,
        "total_number": options.total_number,
        "groups": options.groups,
        "constraints": options.constraints,
        "starvation_seconds": options.starvation_seconds,
        "expected_seconds": options.expected_seconds,
        "stale_seconds": options.stale_seconds,
        "network_topology": options.network_topology,
    }


def podgroup_from_dict(raw: object) -> PodGroup:
    """A PodGroup; Koordinator annotations on it (mode, total-number, groups) are folded in.

    A spec value the CRD's schema lets through but the scheduler cannot use (a negative or
    absurd minResources quantity, a timeout that is not a finite number) is an error on the
    PodGroup: its gang is reported invalid rather than scheduled with half its spec."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    namespace = text(meta.get("namespace"), "default")
    options = read_options(texts(meta.get("annotations")), namespace=namespace)
    errors = list(options.errors)
    timeout = _timeout(spec.get("scheduleTimeoutSeconds"), errors)
    min_resources = spec.get("minResources")
    errors.extend(resource_errors(min_resources, "spec.minResources"))
    return PodGroup(
        key=GangKey(namespace, text(meta.get("name"))),
        uid=text(meta.get("uid")),
        queue=queue_named(texts(meta.get("labels")), texts(meta.get("annotations"))),
        min_member=max(_int(spec.get("minMember"), 1), 1),
        min_resources=resource_list(min_resources) if min_resources else None,
        timeout_seconds=timeout,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        **_stated_options(options),
        subgroup_policy=options.subgroup_policy or (),
        status=_status(obj(body.get("status"))),
        errors=tuple(errors),
    )


# int32, the type of minCount and minMember in both APIs' Go types.


def _count(raw: object, field: str, errors: list[str], *, absent: int | None = None) -> int:
    """A member count of at least 1 (int32); anything else is an error naming the field.
    The API server checks minCount; a CRD that does not validate (ours without its schema,
    Volcano's with its schema replaced) may hand over anything."""
    if raw is None and absent is not None:
        return absent
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= MAX_COUNT:
        return raw
    errors.append(
        f"{field} must be a whole number from 1 to {MAX_COUNT} (the pods that must be "
        f"placed together), got {raw!r}"
    )
    return 1


# spec.disruptionMode: v1alpha2's string, and the one-of object of v1beta1 and v1alpha3.
_DISRUPTION_MODES = {"Pod": "single", "PodGroup": "all"}


def _disruption_mode(raw: object, errors: list[str]) -> str:
    """ "single" (the default: its members may go one at a time) or "all"."""
    if raw is None:
        return "single"
    if isinstance(raw, str) and raw in _DISRUPTION_MODES:
        return _DISRUPTION_MODES[raw]
    if isinstance(raw, Mapping) and len(raw) == 1 and next(iter(raw)) in ("single", "all"):
        return str(next(iter(raw)))
    errors.append(
        f"spec.disruptionMode must be {{single: {{}}}} or {{all: {{}}}} (Pod or PodGroup in "
        f"v1alpha2), got {raw!r}"
    )
    return "single"


def _topology_constraint(raw: object, errors: list[str]) -> NetworkTopology | None:
    """``schedulingConstraints.topology``: at most one ``{key: <node label key>}``, every pod
    of the group in one domain of that label; a hard tier read from the label."""
    if not raw:
        return None
    allowed = (
        "spec.schedulingConstraints.topology must be a list of at most one object with key "
        "(a node label key, e.g. topology.kubernetes.io/rack)"
    )
    if not isinstance(raw, list):
        errors.append(f"{allowed}, got {raw!r}")
        return None
    if len(raw) > 1:
        errors.append(f"{allowed}: at most one, got {raw!r}")
        return None
    (entry,) = raw
    key = entry.get("key") if isinstance(entry, Mapping) else None
    if not isinstance(key, str) or not key:
        errors.append(f"{allowed}, got {raw!r}")
        return None
    if bad := label_key_error(key):
        errors.append(f"{allowed}: {bad}")
        return None
    return NetworkTopology(mode="hard", label_key=key)


def workload_podgroup_from_dict(raw: object, *, version: str = "") -> PodGroup:
    """An upstream PodGroup (``scheduling.k8s.io``, the Workload API; ``version``: the
    apiVersion it was read at, else the object's own, else v1alpha2): exactly one of
    ``spec.schedulingPolicy.gang`` (``minCount`` pods all or nothing) and ``basic`` (no
    gang: each pod on its own, as kube-scheduler places pods). Our Koordinator annotations
    and topology constraints on it count as on our own PodGroups. What it asks that is not
    honoured yet (a CompositePodGroup parent, claims for the whole group) makes it invalid,
    never silently ignored."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    namespace = text(meta.get("namespace"), "default")
    options = read_options(texts(meta.get("annotations")), namespace=namespace)
    errors = list(options.errors)
    policy = spec.get("schedulingPolicy")
    stated = sorted(k for k in ("gang", "basic") if obj(policy).get(k) is not None)
    basic = stated == ["basic"]
    min_member = 1
    if stated == ["gang"]:
        gang = obj(policy).get("gang")
        if isinstance(gang, Mapping):
            min_member = _count(gang.get("minCount"), "spec.schedulingPolicy.gang.minCount", errors)
        else:
            errors.append(
                f"spec.schedulingPolicy.gang must be an object with minCount, got {gang!r}"
            )
    elif not basic:
        errors.append(
            "spec.schedulingPolicy must set exactly one of gang (with minCount: all or "
            "nothing) and basic ({}: pod by pod), got "
            f"{policy!r}"
        )
    colocated = _topology_constraint(obj(spec.get("schedulingConstraints")).get("topology"), errors)
    parent = _parent_name(spec.get("parentCompositePodGroupName"), errors)
    if parent and options.groups:
        errors.append(
            f"spec.parentCompositePodGroupName ({parent}) and the annotation "
            f"{names.KOORD_GROUPS} both say which gangs it is placed with: keep one"
        )
    claims = _group_claims(spec.get("resourceClaims"), errors)
    disruption = _disruption_mode(spec.get("disruptionMode"), errors)
    return PodGroup(
        key=GangKey(namespace, text(meta.get("name"))),
        uid=text(meta.get("uid")),
        queue=queue_named(texts(meta.get("labels")), texts(meta.get("annotations"))),
        min_member=min_member,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        **{**_stated_options(options), "network_topology": colocated or options.network_topology},
        subgroup_policy=options.subgroup_policy or (),
        status=_status(obj(body.get("status"))),
        errors=tuple(errors),
        api=PodGroupApi.WORKLOAD,
        generation=_int(meta.get("generation")),
        basic=basic,
        priority_class=text(spec.get("priorityClassName")),
        priority=whole(spec.get("priority")),
        api_version=version or text(body.get("apiVersion")) or names.WORKLOAD_V1ALPHA2,
        disruption_mode=disruption,
        parent=parent,
        claims=claims,
        preempts=text(spec.get("preemptionPolicy")) != "Never",
    )


# scheduling.k8s.io's MaxPodGroupResourceClaims.
MAX_GROUP_CLAIMS = 4


def _group_claims(raw: object, errors: list[str]) -> tuple[PodClaim, ...]:
    """``spec.resourceClaims``: at most 4 entries, each a name and exactly one of
    ``resourceClaimName`` and ``resourceClaimTemplateName``."""
    if not raw:
        return ()
    allowed = (
        "spec.resourceClaims must be a list of at most 4 objects, each with a name and exactly "
        "one of resourceClaimName and resourceClaimTemplateName"
    )
    if not isinstance(raw, list) or len(raw) > MAX_GROUP_CLAIMS:
        errors.append(f"{allowed}, got {raw!r}")
        return ()
    claims = []
    for entry in raw:
        fields = obj(entry)
        name = text(fields.get("name"))
        claim = text(fields.get("resourceClaimName"))
        template = text(fields.get("resourceClaimTemplateName"))
        if not isinstance(entry, Mapping) or not name or bool(claim) == bool(template):
            errors.append(f"{allowed}, got {entry!r}")
            return ()
        claims.append(PodClaim(name=name, claim=claim, template=template))
    return tuple(claims)


def _parent_name(raw: object, errors: list[str]) -> str:
    """``spec.parentCompositePodGroupName``: the name of a CompositePodGroup in the same
    namespace, or "" for none."""
    if raw is None or raw == "":
        return ""
    if isinstance(raw, str) and is_subdomain(raw):
        return raw
    errors.append(
        "spec.parentCompositePodGroupName must name a CompositePodGroup in the same namespace "
        f"(a DNS subdomain: lower-case letters, digits, '-' and '.'), got {raw!r}"
    )
    return ""


def composite_podgroup_from_dict(raw: object) -> CompositePodGroup:
    """A CompositePodGroup (``scheduling.k8s.io/v1alpha3``): ``spec.schedulingPolicy`` is
    exactly one of ``gang`` (``minGroupCount`` of its children placed together) and
    ``basic`` (any one child at a time, as kube-scheduler counts it: a minimum of 1)."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    errors: list[str] = []
    policy = spec.get("schedulingPolicy")
    stated = sorted(k for k in ("gang", "basic") if obj(policy).get(k) is not None)
    min_groups = 1
    if stated == ["gang"]:
        gang = obj(policy).get("gang")
        if isinstance(gang, Mapping):
            min_groups = _count(
                gang.get("minGroupCount"), "spec.schedulingPolicy.gang.minGroupCount", errors
            )
        else:
            errors.append(
                f"spec.schedulingPolicy.gang must be an object with minGroupCount, got {gang!r}"
            )
    elif stated != ["basic"]:
        errors.append(
            "spec.schedulingPolicy must set exactly one of gang (with minGroupCount: that many "
            f"of its children placed together) and basic ({{}}), got {policy!r}"
        )
    return CompositePodGroup(
        key=GangKey(text(meta.get("namespace"), "default"), text(meta.get("name"))),
        uid=text(meta.get("uid")),
        parent=_parent_name(spec.get("parentCompositePodGroupName"), errors),
        min_groups=min_groups,
        basic=stated == ["basic"],
        disruption_mode=_disruption_mode(spec.get("disruptionMode"), errors),
        errors=tuple(errors),
    )


def volcano_podgroup_from_dict(raw: object) -> PodGroup:
    """Volcano's PodGroup (``scheduling.volcano.sh/v1beta1``): ``spec.minMember`` (1 when
    absent or 0), ``minResources``, ``priorityClassName`` (the gang's priority), ``queue`` (its
    Queue; else the annotation or label, as on other PodGroups). ``minTaskMember`` is
    Volcano's own and not read."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    namespace = text(meta.get("namespace"), "default")
    options = read_options(texts(meta.get("annotations")), namespace=namespace)
    errors = list(options.errors)
    # 0 (what Volcano's CRD allows below 1) is Volcano's "no minimum": its gang plugin
    # finds such a job ready at once, each pod placed as it comes; here, a minimum of 1.
    raw_min = spec.get("minMember")
    zero = isinstance(raw_min, int) and not isinstance(raw_min, bool) and raw_min == 0
    min_member = 1 if zero else _count(raw_min, "spec.minMember", errors, absent=1)
    min_resources = spec.get("minResources")
    errors.extend(resource_errors(min_resources, "spec.minResources"))
    policies = subgroup_policy(spec.get("subGroupPolicy"), errors)
    topology = network_topology(spec.get("networkTopology"), "spec", errors)
    # Volcano's CRD defaults spec.queue to "default": a label or annotation naming another
    # queue is what the user said, not the API server.
    queue = text(spec.get("queue"))
    named = queue_named(texts(meta.get("labels")), texts(meta.get("annotations")))
    if named and queue in ("", DEFAULT_QUEUE):
        queue = named
    return PodGroup(
        key=GangKey(namespace, text(meta.get("name"))),
        uid=text(meta.get("uid")),
        queue=queue,
        min_member=min_member,
        min_resources=resource_list(min_resources) if min_resources else None,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        **{**_stated_options(options), "network_topology": topology or options.network_topology},
        status=_status(obj(body.get("status"))),
        errors=tuple(errors),
        api=PodGroupApi.VOLCANO,
        generation=_int(meta.get("generation")),
        priority_class=text(spec.get("priorityClassName")),
        subgroup_policy=policies or options.subgroup_policy or (),
    )


def podgroup_of(api: PodGroupApi, raw: object) -> PodGroup:
    """A PodGroup of the kind ``api`` names."""
    if api is PodGroupApi.WORKLOAD:
        return workload_podgroup_from_dict(raw)
    if api is PodGroupApi.VOLCANO:
        return volcano_podgroup_from_dict(raw)
    return podgroup_from_dict(raw)


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
        value=_int(body.get("value")),
        global_default=bool(body.get("globalDefault")),
    )


def podgroup_status_to_dict(
    status: PodGroupStatus, api: PodGroupApi = PodGroupApi.OURS
) -> dict[str, Any]:
    """The status as the kind ``api`` names defines it: ours every field (so a merge patch
    replaces it whole); of the upstream PodGroup's conditions the one we write
    (metav1.Condition, with observedGeneration; sent as a strategic merge by type, so other
    writers' conditions stay as they are); Volcano's phase, counts and conditions."""
    if api is PodGroupApi.WORKLOAD:
        ours = replace(
            status,
            conditions=tuple(c for c in status.conditions if c.type in names.UPSTREAM_CONDITIONS),
        )
        return {"conditions": _conditions(ours, metav1=True)}
    if api is PodGroupApi.VOLCANO:
        return {
            "phase": status.phase,
            "running": status.running,
            "succeeded": status.succeeded,
            "failed": status.failed,
            "conditions": _conditions(status),
        }
    body: dict[str, Any] = {
        "phase": status.phase,
        "scheduled": status.scheduled,
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "conditions": _conditions(status),
    }
    if status.schedule_start_time:
        body["scheduleStartTime"] = status.schedule_start_time
    if status.occupied_by:
        body["occupiedBy"] = status.occupied_by
    return body


def _conditions(status: PodGroupStatus, *, metav1: bool = False) -> list[dict[str, Any]]:
    """The conditions as the API writes them. ``metav1`` (the upstream PodGroup's
    metav1.Condition): with observedGeneration where there is one, and the message cut to
    the API server's limit in bytes."""
    return [
        {
            "type": c.type,
            "status": c.status,
            **(
                {"observedGeneration": c.observed_generation}
                if metav1 and c.observed_generation
                else {}
            ),
            "reason": c.reason,
            "message": clip_message(c.message) if metav1 else c.message,
            "lastTransitionTime": c.last_transition,
        }
        for c in status.conditions
    ]
