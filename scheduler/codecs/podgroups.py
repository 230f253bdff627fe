"""PodGroups of every kind we read (ours, the Workload API's, Volcano's) and the Workload
API's CompositePodGroup, from plain dicts; and a PodGroup's status, as each kind writes it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scheduler.codecs.gangs import is_subdomain, read_options
from scheduler.codecs.objects import queue_named, resource_errors, resource_list
from scheduler.codecs.owners import controlling_job
from scheduler.codecs.selectors import label_key_error
from scheduler.codecs.shapes import MAX_COUNT, integer, obj, objs, text, texts, whole
from scheduler.codecs.subgroups import network_topology, subgroup_policy
from scheduler.model import names
from scheduler.model.gangs import (
    CompositePodGroup,
    Condition,
    PodGroup,
    PodGroupStatus,
    clip_message,
)
from scheduler.model.pods import GangKey, GangOptions, NetworkTopology, PodClaim, PodGroupApi
from scheduler.model.queues import DEFAULT_QUEUE
from scheduler.model.times import parse_time

Obj = Mapping[str, Any]


def _status(raw: Obj) -> PodGroupStatus:
    return PodGroupStatus(
        phase=text(raw.get("phase")),
        scheduled=integer(raw.get("scheduled")),
        running=integer(raw.get("running")),
        succeeded=integer(raw.get("succeeded")),
        failed=integer(raw.get("failed")),
        schedule_start_time=text(raw.get("scheduleStartTime")),
        occupied_by=text(raw.get("occupiedBy")),
        conditions=tuple(
            Condition(
                type=text(c.get("type")),
                status=text(c.get("status"), "Unknown"),
                reason=text(c.get("reason")),
                message=text(c.get("message")),
                last_transition=text(c.get("lastTransitionTime")),
                observed_generation=integer(c.get("observedGeneration")),
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


def _read(raw: object) -> tuple[Obj, Obj, Obj, GangOptions]:
    """A PodGroup of any kind: the object, its metadata and spec, and what our and
    Koordinator's annotations on it say."""
    body = obj(raw)
    meta = obj(body.get("metadata"))
    namespace = text(meta.get("namespace"), "default")
    return (
        body,
        meta,
        obj(body.get("spec")),
        read_options(texts(meta.get("annotations")), namespace=namespace),
    )


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
    body, meta, spec, options = _read(raw)
    namespace = text(meta.get("namespace"), "default")
    errors = list(options.errors)
    timeout = _timeout(spec.get("scheduleTimeoutSeconds"), errors)
    min_resources = spec.get("minResources")
    errors.extend(resource_errors(min_resources, "spec.minResources"))
    return PodGroup(
        key=GangKey(namespace, text(meta.get("name"))),
        uid=text(meta.get("uid")),
        queue=queue_named(texts(meta.get("labels")), texts(meta.get("annotations"))),
        min_member=max(integer(spec.get("minMember"), 1), 1),
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
    body, meta, spec, options = _read(raw)
    namespace = text(meta.get("namespace"), "default")
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
        generation=integer(meta.get("generation")),
        basic=basic,
        priority_class=text(spec.get("priorityClassName")),
        priority=whole(spec.get("priority")),
        api_version=version or text(body.get("apiVersion")) or names.WORKLOAD_V1ALPHA2,
        disruption_mode=disruption,
        parent=parent,
        claims=claims,
        preempts=text(spec.get("preemptionPolicy")) != "Never",
        made_by_job=controlling_job(meta.get("ownerReferences"))[0],
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
    body, meta, spec, options = _read(raw)
    namespace = text(meta.get("namespace"), "default")
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
        generation=integer(meta.get("generation")),
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


def podgroup_status_to_dict(
    status: PodGroupStatus, api: PodGroupApi = PodGroupApi.OURS
) -> dict[str, Any]:
    """The status as the kind ``api`` names defines it: ours every field (so a merge patch
    replaces it whole); of the upstream PodGroup's conditions the one we write
    (metav1.Condition, with observedGeneration; sent as a strategic merge by type, so other
    writers' conditions stay as they are); Volcano's phase, counts and conditions."""
    if api is PodGroupApi.WORKLOAD:
        written = (*names.UPSTREAM_CONDITIONS, names.FOREIGN_ESTIMATED_START)
        ours = replace(status, conditions=tuple(c for c in status.conditions if c.type in written))
        conditions = _conditions(ours, metav1=True)
        if not any(c.type == names.FOREIGN_ESTIMATED_START for c in ours.conditions):
            # A strategic merge keeps what it is not told to delete (by type, the list's key):
            # a status without an estimate says to delete ours, on every write and not only
            # when the cache shows one, since an estimate's write may still be on its way
            # when the pass that places the gang runs. Where there is none, a no-op.
            conditions.append({"type": names.FOREIGN_ESTIMATED_START, "$patch": "delete"})
        return {"conditions": conditions}
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
