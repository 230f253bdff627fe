"""Gang declarations on pods and PodGroups: labels and annotations to a GangClaim.

Every way of declaring a gang that the field uses is read here and normalised: the
scheduler-plugins label, its older spellings, and Koordinator's annotations. A malformed
value never raises: it becomes an error message that names the annotation, what it holds,
and what is allowed, and the gang is reported invalid instead of scheduled.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from scheduler.codecs.shapes import loads, texts
from scheduler.codecs.subgroups import network_topology, subgroup_policy
from scheduler.codecs.topology import read_constraints
from scheduler.model import names
from scheduler.model.pods import (
    GangClaim,
    GangKey,
    GangOptions,
    GangSource,
    Mode,
    NetworkTopology,
    SubGroupPolicy,
)
from scheduler.model.times import parse_duration

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MODES = {m.value.lower(): m for m in Mode}


def _count(annotations: Mapping[str, str], key: str, errors: list[str]) -> int | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        errors.append(f"annotation {key} must be a whole number of at least 1, got {raw!r}")
        return None
    return value


def _groups(
    annotations: Mapping[str, str], namespace: str, errors: list[str]
) -> tuple[GangKey, ...] | None:
    raw = annotations.get(names.KOORD_GROUPS)
    if raw is None or not str(raw).strip():
        return None
    example = '["namespace-a/gang-a", "namespace-b/gang-b"]'
    try:
        entries = json.loads(raw)
    except (ValueError, RecursionError):
        # JSONDecodeError is a ValueError, and so is a number of more than 4,300 digits;
        # "[[[[..." nested deeper than the interpreter's stack is a RecursionError.
        errors.append(
            f"annotation {names.KOORD_GROUPS} must be a JSON list of namespace/name strings "
            f"such as {example}, got {raw!r}"
        )
        return None
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        errors.append(
            f"annotation {names.KOORD_GROUPS} must be a JSON list of namespace/name strings "
            f"such as {example}, got {raw!r}"
        )
        return None
    keys: list[GangKey] = []
    for entry in entries:
        ns, _, name = entry.rpartition("/")
        key = GangKey(ns or namespace, name)
        problem = key_problem(key)
        if problem:
            errors.append(f"annotation {names.KOORD_GROUPS} entry {entry!r}: {problem}")
            return None
        keys.append(key)
    return tuple(sorted(set(keys)))


def is_subdomain(name: str) -> bool:
    """Whether ``name`` is a DNS subdomain (RFC 1123), as most object names must be."""
    return bool(_DNS_SUBDOMAIN.match(name)) and len(name) <= 253


def key_problem(key: GangKey) -> str:
    """Why ``key`` cannot name a gang, or "" if it can."""
    if not _DNS_LABEL.match(key.namespace) or len(key.namespace) > 63:
        return f"namespace {key.namespace!r} is not a valid namespace name"
    if not is_subdomain(key.name):
        return (
            f"gang name {key.name!r} must be lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (RFC 1123)"
        )
    return ""


def read_options(annotations: Mapping[str, str], *, namespace: str) -> GangOptions:
    """Koordinator's optional settings (and the legacy min-available) from annotations.

    Annotations are strings; an entry that is not (only input that bypassed the API server
    has one) is not read."""
    stated, errors = stated_options(texts(annotations), namespace=namespace)
    return GangOptions(errors=tuple(errors), **stated)


def stated_options(
    annotations: Mapping[str, str], *, namespace: str
) -> tuple[dict[str, Any], list[str]]:
    """``read_options`` of annotations whose entries are all strings, as the keyword
    arguments of a GangOptions (or of a GangClaim, which holds the same) and its errors: a
    pod's claim is made from them without a GangOptions between (a quarter of its cost)."""
    errors: list[str] = []
    min_available = _count(annotations, names.KOORD_MIN_AVAILABLE, errors)
    if min_available is None and names.KOORD_MIN_AVAILABLE not in annotations:
        min_available = _count(annotations, names.LEGACY_MIN_AVAILABLE, errors)
    total = _count(annotations, names.KOORD_TOTAL_NUMBER, errors)
    waiting = _duration(annotations, names.KOORD_WAITING_TIME, errors)
    starvation = _duration(annotations, names.STARVATION_AFTER, errors)
    expected = _duration(annotations, names.EXPECTED_DURATION, errors)
    stale = (
        math.inf
        if str(annotations.get(names.STALE_AFTER, "")).strip().lower() == "never"
        else _duration(annotations, names.STALE_AFTER, errors, other=", or never")
    )
    mode: Mode | None = None
    raw_mode = annotations.get(names.KOORD_MODE)
    if raw_mode is not None:
        mode = _MODES.get(str(raw_mode).strip().lower())
        if mode is None:
            errors.append(
                f"annotation {names.KOORD_MODE} must be Strict or NonStrict, got {raw_mode!r}"
            )
    groups = _groups(annotations, namespace, errors)
    scoring = annotations.get(names.SCORING)
    if scoring is not None and scoring not in names.SCORINGS:
        errors.append(
            f"annotation {names.SCORING} must be one of {', '.join(names.SCORINGS)}, "
            f"got {scoring!r}"
        )
    constraints = None
    if names.TOPOLOGY_CONSTRAINTS in annotations:
        constraints = read_constraints(annotations[names.TOPOLOGY_CONSTRAINTS])
        errors.extend(f"annotation {names.TOPOLOGY_CONSTRAINTS}: {e}" for e in constraints.errors)
    policies = _subgroup_policy(annotations, errors)
    tier = _network_topology(annotations, errors)
    stated = {
        "min_available": min_available,
        "total_number": total,
        "waiting_seconds": waiting,
        "starvation_seconds": starvation,
        "expected_seconds": expected,
        "stale_seconds": stale,
        "mode": mode,
        "groups": groups,
        "constraints": constraints,
        "subgroup_policy": policies,
        "network_topology": tier,
    }
    return stated, errors


def _network_topology(annotations: Mapping[str, str], errors: list[str]) -> NetworkTopology | None:
    """gang-scheduler.io/network-topology: a networkTopology as JSON, such as
    ``{"mode": "hard", "highestTierAllowed": 1}``."""
    raw = annotations.get(names.NETWORK_TOPOLOGY)
    if raw is None:
        return None
    key = f"annotation {names.NETWORK_TOPOLOGY}"
    value, problem = loads(raw)
    if problem:
        errors.append(
            f'{key} must be a JSON object such as {{"mode": "hard", "highestTierAllowed": 1}}: '
            f"{problem}"
        )
        return None
    return network_topology(value, key, errors, named=False)


def _subgroup_policy(
    annotations: Mapping[str, str], errors: list[str]
) -> tuple[SubGroupPolicy, ...] | None:
    """gang-scheduler.io/subgroup-policy: Volcano's ``spec.subGroupPolicy`` as JSON."""
    raw = annotations.get(names.SUBGROUP_POLICY)
    if raw is None:
        return None
    key = names.SUBGROUP_POLICY
    value, problem = loads(raw)
    if problem:
        errors.append(f"annotation {key} must be a JSON list of subgroup policies: {problem}")
        return None
    found: list[str] = []
    policies = subgroup_policy(value, found)
    errors.extend(f"annotation {key}: {e.replace('spec.subGroupPolicy', 'policy')}" for e in found)
    return policies


def _duration(
    annotations: Mapping[str, str], key: str, errors: list[str], *, other: str = ""
) -> float | None:
    """A duration annotation; ``other``: what else it may say, for the error."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return parse_duration(str(raw))
    except ValueError:
        errors.append(
            f"annotation {key} must be a duration such as 600s, 10m or 1h, at most 2562047h"
            f"{other}, got {raw!r}"
        )
        return None


def read_claim(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    *,
    namespace: str,
    scheduling_group: object = None,
) -> GangClaim | None:
    """The gang a pod declares, or None for a pod that declares none.

    The name comes from Koordinator's annotation, else the scheduler-plugins label, else the
    legacy label or annotation, else Sakkara's group label, else Volcano's (and kube-batch's)
    annotation, else the pod's ``spec.schedulingGroup`` (the upstream Workload API). The
    field comes last because controllers fill it in on their own (1.37's Job controller
    puts every Job's pods in a PodGroup of its making, with WorkloadWithJob), while a label or
    annotation of ours on the pod is always someone's choice. Koordinator's settings override
    a PodGroup's, as its proposal says. Labels and annotations that are not strings are not
    read; a ``schedulingGroup`` without a usable ``podGroupName`` (only input that bypassed
    the API server has one) is a claim with an error that says so.
    """
    return claim_of(
        texts(labels), texts(annotations), namespace=namespace, scheduling_group=scheduling_group
    )


def claim_of(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    *,
    namespace: str,
    scheduling_group: object = None,
) -> GangClaim | None:
    """``read_claim`` of labels and annotations that are maps of strings already (as
    ``pod_from_dict`` has them): a pod's watch event reads them once, not three times."""
    if names.KOORD_NAME in annotations:
        name, source = annotations[names.KOORD_NAME], GangSource.KOORDINATOR
    elif names.POD_GROUP_LABEL in labels:
        name, source = labels[names.POD_GROUP_LABEL], GangSource.POD_GROUP
    elif names.LEGACY_POD_GROUP_LABEL in labels:
        name, source = labels[names.LEGACY_POD_GROUP_LABEL], GangSource.LEGACY
    elif names.LEGACY_NAME in annotations:
        name, source = annotations[names.LEGACY_NAME], GangSource.LEGACY
    elif names.SAKKARA_GROUP_NAME in labels:
        name, source = labels[names.SAKKARA_GROUP_NAME], GangSource.SAKKARA
    elif names.VOLCANO_GROUP_NAME in annotations:
        name, source = annotations[names.VOLCANO_GROUP_NAME], GangSource.VOLCANO
    elif scheduling_group is not None:
        raw = (
            scheduling_group.get("podGroupName") if isinstance(scheduling_group, Mapping) else None
        )
        name, source = (raw if isinstance(raw, str) else ""), GangSource.WORKLOAD
    else:
        return None
    stated, errors = stated_options(annotations, namespace=namespace)
    key = GangKey(namespace, str(name).strip())
    problem = key_problem(key)
    if problem:
        errors.insert(0, f"{source.value}: {problem}")
        if "/" in key.name:  # never the name of a gang from an owner ("Job/train"): not its
            key = GangKey(namespace, "invalid:" + key.name)
    return GangClaim(key=key, source=source, errors=tuple(errors), **stated)
