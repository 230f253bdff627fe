"""From pods and PodGroups to gangs, GangGroups and the order they are tried in.

A pod's gang settings may come from its PodGroup and from annotations on the pods; where
both say something the annotations win, as in Koordinator's proposal. A pod of ours that
names no gang is a gang of one. Gangs that all name the same ``groups`` form a GangGroup:
nothing in it is bound until every gang in it can be. Consent is mutual: a gang that names
another which does not name it back is invalid and waits alone, so no namespace can tie a
gang of another to its own (block it, time it out, mark it) by naming it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from scheduler.core.filtering import selector_matches
from scheduler.model import names
from scheduler.model.composites import Hierarchies
from scheduler.model.config import Config
from scheduler.model.gangs import Gang, JobProgress, Owner, PodGroup, SubGroup
from scheduler.model.owners import Grouping, OwnerKey, OwnerKind, child_job, gang_name
from scheduler.model.pods import (
    GangClaim,
    GangKey,
    GangOptions,
    GangSource,
    Mode,
    NetworkTopology,
    Pod,
    SubGroupPolicy,
    gang_key_of,
)
from scheduler.model.snapshot import PriorityClass, Snapshot
from scheduler.model.topology import Topology, topology_from_labels


def priority_of(pod: Pod, classes: Mapping[str, PriorityClass]) -> int:
    """spec.priority as admission set it; else the class's value; else the global default."""
    if pod.priority is not None:
        return pod.priority
    if pod.priority_class in classes:
        return classes[pod.priority_class].value
    defaults = [c.value for c in classes.values() if c.global_default]
    return max(defaults) if defaults else 0


T = TypeVar("T")


def _agreed(values: Iterable[T | None]) -> T | None:
    """The value most members state (ties: the smallest as text), or None if none does."""
    counted = Counter(v for v in values if v is not None)
    if not counted:
        return None
    return sorted(counted.items(), key=lambda kv: (-kv[1], str(kv[0])))[0][0]


def _stated(
    claims: list[GangClaim], podgroup: PodGroup | None, field: str, podgroup_field: str = ""
) -> Any:
    """What the members' annotations agree on, else what the PodGroup says (annotations
    override a PodGroup, as in Koordinator's proposal)."""
    value = _agreed(getattr(c, field) for c in claims)
    if value is None and podgroup is not None:
        value = getattr(podgroup, podgroup_field or field)
    return value


def _queue(pods: Iterable[Pod], podgroup: PodGroup | None = None) -> str:
    """The queue a gang is in: its PodGroup's, else what its members name."""
    if podgroup is not None and podgroup.queue:
        return podgroup.queue
    return _agreed(p.queue or None for p in pods) or ""


def _progress_of_one_job(
    members: tuple[Pod, ...], owners: Mapping[OwnerKey, Owner]
) -> JobProgress | None:
    """The progress of the one Job every member belongs to, by its status; None when the
    members are not all one Job's, or that Job is not seen, or a Job of the same name is
    seen but not this one (its uid differs: a JobSet restart makes its Jobs anew under the
    same names, and the old one's count must not fill the new one's places)."""
    job = uid = None
    for pod in members:
        if not pod.job or (job is not None and (pod.job, pod.job_uid) != (job, uid)):
            return None
        job, uid = pod.job, pod.job_uid
    if job is None:
        return None
    owner = owners.get(OwnerKey(members[0].ref.namespace, OwnerKind.JOB, job))
    if owner is None or (uid and owner.uid and owner.uid != uid):
        return None
    return owner.progress


def _with_job_progress(
    gangs: dict[GangKey, Gang], owners: Mapping[OwnerKey, Owner]
) -> dict[GangKey, Gang]:
    """Each gang of one Job's pods with that Job's progress (``Gang.completed``); a pod
    alone (no gang) needs no count of completions."""
    for key, gang in gangs.items():
        first = gang.members[0]
        if first.job and first.gang and (progress := _progress_of_one_job(gang.members, owners)):
            gangs[key] = replace(gang, job_progress=progress)
    return gangs


@dataclass(frozen=True, slots=True)
class Resolution:
    gangs: Mapping[GangKey, Gang]
    # Gangs whose members wait for a PodGroup that does not exist (yet).
    missing_podgroups: frozenset[GangKey]
    # Sakkara groups whose pods wait for their group ConfigMap.
    missing_groups: frozenset[GangKey] = frozenset()
    # Gangs from owners whose owner object is not in the cache (yet).
    missing_owners: frozenset[GangKey] = frozenset()
    # Gangs whose PodGroup's CompositePodGroup hierarchy names one that does not exist (yet):
    # the name of the missing one.
    missing_composites: Mapping[GangKey, str] = field(default_factory=dict)


def resolve(snapshot: Snapshot, config: Config) -> Resolution:
    members: dict[GangKey, list[Pod]] = {}
    names = config.scheduler_names
    for pod in snapshot.pods:
        if pod.scheduler_name not in names:
            continue
        key = gang_key_of(pod)
        members.setdefault(key, []).append(pod)

    gangs: dict[GangKey, Gang] = {}
    missing: set[GangKey] = set()
    missing_groups: set[GangKey] = set()
    missing_owners: set[GangKey] = set()
    owner_groups: dict[tuple[OwnerKey, int], tuple[GangKey, ...]] = {}
    for key, pods in sorted(members.items()):
        pods.sort(key=lambda p: p.ref)
        claims = [p.gang for p in pods if p.gang is not None]
        if not claims:
            gangs[key] = Gang(
                key=key,
                min_member=1,
                total=1,
                mode=Mode.STRICT,
                timeout_seconds=config.default_timeout_seconds,
                created=pods[0].created,
                group=(key,),
                members=tuple(pods),
                queue=pods[0].queue,
            )
            continue
        if owned := _owned(claims, snapshot.podgroups.get(key)):
            gangs[key] = _owner_gang(
                key,
                pods,
                owned,
                snapshot=snapshot,
                config=config,
                missing=missing_owners,
                memo=owner_groups,
            )
            continue
        if claims[0].source is GangSource.SAKKARA:
            gangs[key] = _sakkara_gang(key, pods, snapshot, config)
            if key not in snapshot.groups:
                missing_groups.add(key)
            continue
        errors: list[str] = []
        # The kind of PodGroup the pods name; a PodGroup of another kind under the same name
        # is not this gang's.
        apis = sorted({c.source.api for c in claims}, key=lambda a: a.value)
        podgroup: PodGroup | None = snapshot.podgroups.get(key)
        if podgroup is not None and podgroup.api is not claims[0].source.api:
            podgroup = None
        if len(apis) > 1:
            errors.append(
                f"the pods of gang {key} name it as PodGroups of different kinds "
                f"({', '.join(a.value for a in apis)}): give every member the same kind"
            )
        min_available = _agreed(c.min_available for c in claims)
        # Declared by name only: the PodGroup says how many; wait until it exists.
        named_only = all(c.source.needs_podgroup for c in claims)
        if podgroup is None and min_available is None and named_only:
            missing.add(key)
        for claim in claims:
            errors.extend(e for e in claim.errors if e not in errors)
        if podgroup is not None:
            errors.extend(e for e in podgroup.errors if e not in errors)
        min_member = min_available or (podgroup.min_member if podgroup else 1)
        total_claimed = _stated(claims, podgroup, "total_number")
        if total_claimed is not None and min_member > total_claimed:
            errors.append(
                f"min-available ({min_member}) is greater than total-number ({total_claimed}); "
                "the gang could never be complete"
            )
        mode = _stated(claims, podgroup, "mode")
        timeout = _stated(claims, podgroup, "waiting_seconds", "timeout_seconds")
        groups = _stated(claims, podgroup, "groups")
        constraints = next(  # the members' annotation, else the PodGroup's
            (c.constraints for c in claims if c.constraints is not None),
            podgroup.constraints if podgroup is not None else None,
        )
        subgroups, minimums = _subgroups(
            _stated(claims, podgroup, "subgroup_policy"), pods, constraints, errors
        )
        gangs[key] = Gang(
            key=key,
            min_member=min_member,
            total=total_claimed or min_member,
            # The solver places a gang whole, a subgroup is whole or nothing: NonStrict's
            # partial holds do not apply.
            mode=Mode.STRICT if constraints is not None or minimums else (mode or Mode.STRICT),
            timeout_seconds=float(timeout or config.default_timeout_seconds),
            created=podgroup.created if podgroup and podgroup.created else pods[0].created,
            group=tuple(sorted({key, *(groups or ())})),
            members=tuple(pods),
            podgroup=podgroup,
            min_resources=podgroup.min_resources if podgroup else None,
            errors=tuple(errors),
            constraints=constraints,
            starvation_seconds=_stated(claims, podgroup, "starvation_seconds"),
            expected_seconds=_stated(claims, podgroup, "expected_seconds"),
            stale_seconds=_stated(claims, podgroup, "stale_seconds"),
            priority=_priority(podgroup, snapshot.priority_classes),
            queue=_queue(pods, podgroup),
            subgroups=subgroups,
            subgroup_minimums=minimums,
            network_topology=_stated(claims, podgroup, "network_topology"),
        )
    missing_composites = _in_hierarchies(gangs, snapshot)
    return Resolution(
        gangs=_with_consent(_with_job_progress(gangs, snapshot.owners)),
        missing_podgroups=frozenset(missing),
        missing_groups=frozenset(missing_groups),
        missing_owners=frozenset(missing_owners),
        missing_composites=missing_composites,
    )


def _in_hierarchies(gangs: dict[GangKey, Gang], snapshot: Snapshot) -> dict[GangKey, str]:
    """Each gang of an upstream PodGroup that names a CompositePodGroup joins the GangGroup
    of every PodGroup under the same root, with the root's quorum (``Gang.quorum``); a tree
    in error makes it invalid. Returns the gangs that wait for a CompositePodGroup not
    created yet, with its name."""
    missing: dict[GangKey, str] = {}
    hierarchies = Hierarchies(podgroups=snapshot.podgroups, composites=snapshot.composites)
    for key, gang in gangs.items():
        podgroup = gang.podgroup
        if podgroup is None or not podgroup.parent:
            continue
        found = hierarchies.of(key)
        if found.error:
            gangs[key] = replace(gang, errors=(*gang.errors, found.error))
        elif found.missing:
            missing[key] = found.missing
        elif found.quorum is not None:
            # Placed whole by the gang rule at every level: no NonStrict holds.
            gangs[key] = replace(
                gang, group=found.quorum.gangs(), quorum=found.quorum, mode=Mode.STRICT
            )
    return missing


def topology_of(snapshot: Snapshot, config: Config) -> Topology:
    """The tree this pass places on: the topology ConfigMap's, else one from node labels
    (--topology-from-labels), else flat (root and nodes)."""
    if snapshot.topology is not None:
        return snapshot.topology
    if config.topology_labels:
        labels = {n.name: n.labels for n in snapshot.nodes.values()}
        return topology_from_labels(config.topology_labels, labels)
    return Topology.flat(sorted(snapshot.nodes))


def tier_level(topology: Topology, spec: NetworkTopology, *, where: str) -> tuple[str, str]:
    """The level of ``topology`` a networkTopology names: tier k is the k-th level
    above the nodes (Volcano's tiers: 1 the lowest), tier 0 one node; a tier name is a
    level's name. ("", why) when it names none (a soft one above the top: the top)."""
    levels = topology.levels  # top to bottom, the nodes last
    if spec.label_key:
        found = next((lv for lv, key in topology.label_keys.items() if key == spec.label_key), "")
        if found:
            return found, ""
        if topology.name == "flat" or topology.label_keys:
            fix = (
                "start the scheduler with --topology-from-labels naming it "
                f"(LEVEL={spec.label_key})"
            )
        else:  # a sakkara.topology ConfigMap's tree, which no label makes
            fix = (
                "the sakkara.topology ConfigMap's tree is in use, whose levels no node label "
                "makes: state the placement in the annotation "
                f"{names.TOPOLOGY_CONSTRAINTS} instead"
            )
        return "", (
            f"{where} no level of topology {topology.name!r} is read from node label "
            f"{spec.label_key} (its levels: {', '.join(levels)}): {fix}, or drop the constraint"
        )
    if spec.highest_tier_name:
        if spec.highest_tier_name in levels:
            return spec.highest_tier_name, ""
        return "", (
            f"{where} highestTierName {spec.highest_tier_name!r} is no level of topology "
            f"{topology.name!r} (its levels: {', '.join(levels)})"
        )
    tier = spec.highest_tier if spec.highest_tier is not None else 1
    if tier < len(levels):
        return levels[len(levels) - 1 - tier], ""
    if spec.mode == "soft":
        return levels[0], ""  # above the top: anywhere, one domain of the top preferred
    return "", (
        f"{where} highestTierAllowed {tier} is above every level of topology "
        f"{topology.name!r} (its levels: {', '.join(levels)}; tier 1 is the lowest above the "
        "nodes): describe the topology (a sakkara.topology ConfigMap or "
        "--topology-from-labels) or lower the tier"
    )


def subgroups_of(policies: Iterable[SubGroupPolicy], pods: Iterable[Pod]) -> tuple[SubGroup, ...]:
    """The subgroups of a gang, as Volcano forms them: a pod joins the first policy
    whose selector it matches (every pod, without one) and whose match label keys it carries,
    each with a value; the pods of a policy with the same values are one subgroup. A policy
    without match label keys takes no pod (Volcano's getOrCreateSubJob lets it fall through
    to the next policy, else to the plain members). Ordered by policy, then index (the first
    value as a whole number, as Volcano's MatchIndex), then name."""
    policies = tuple(policies)
    found: dict[tuple[int, tuple[str, ...]], list[Pod]] = {}
    for pod in sorted(pods, key=lambda p: p.ref.name):
        for at, policy in enumerate(policies):
            if policy.selector is not None and not selector_matches(policy.selector, pod.labels):
                continue
            values = tuple(pod.labels.get(k, "") for k in policy.match_label_keys)
            if not values or not all(values):
                continue
            found.setdefault((at, values), []).append(pod)
            break
    subgroups = []
    for (at, values), members in found.items():
        policy = policies[at]
        first = values[0] if values else ""
        subgroups.append(
            SubGroup(
                policy=policy.name,
                name=f"{policy.name}-{'-'.join(values)}" if values else policy.name,
                size=policy.size,
                members=tuple(p.ref for p in members),
                index=int(first) if first.isascii() and first.isdigit() else 0,
                topology=policy.topology,
            )
        )
    order = {p.name: i for i, p in enumerate(policies)}
    return tuple(sorted(subgroups, key=lambda g: (order[g.policy], g.index, g.name)))


def _subgroups(
    policies: tuple[SubGroupPolicy, ...] | None,
    pods: list[Pod],
    constraints: object,
    errors: list[str],
) -> tuple[tuple[SubGroup, ...], tuple[tuple[str, int], ...]]:
    """A gang's subgroups (its PodGroup's spec.subGroupPolicy, or the members' or the
    PodGroup's gang-scheduler.io/subgroup-policy) and, per policy, how many it needs; what
    cannot be honoured is added to ``errors``, never silently dropped."""
    if not policies:
        return (), ()
    if constraints is not None:
        problem = (
            "subgroup policies with a topology constraint on the gang are not supported yet: "
            "remove one of them"
        )
        if problem not in errors:
            errors.append(problem)
    for policy in policies:
        if not policy.match_label_keys and policy.min_subgroups:
            problem = (
                f"subgroup policy {policy.name} has no matchLabelKeys, so it forms no "
                f"subgroup (as in Volcano), and its minSubGroups {policy.min_subgroups} could "
                "never be met: name the label that tells its subgroups apart"
            )
            if problem not in errors:
                errors.append(problem)
    minimums = tuple((p.name, p.min_subgroups) for p in policies)
    return subgroups_of(policies, pods), minimums


def _owner_gang(
    key: GangKey,
    pods: list[Pod],
    claims: list[GangClaim],
    *,
    snapshot: Snapshot,
    config: Config,
    missing: set[GangKey],
    memo: dict[tuple[OwnerKey, int], tuple[GangKey, ...]],
) -> Gang:
    """A gang its pods' owner makes: the pods say which owner and which part of it, the
    owner how many members that part needs and which parts bind together. The pods' own
    annotations override the owner's, as they override a PodGroup's."""
    claim = claims[0]
    ref = claim.owner
    assert ref is not None  # every OWNER claim names its owner
    errors = list(dict.fromkeys(e for c in claims for e in c.errors))
    owner = snapshot.owners.get(ref)
    grouping = _agreed(c.grouping for c in claims)
    group: tuple[GangKey, ...] = (key,)
    size = 1
    options = GangOptions()
    priority_class = ""
    if owner is None:
        if ref.kind in snapshot.owner_kinds:
            missing.add(key)
            origin = f"gang from {ref}, which is not in the cache (deleted, or not seen yet)"
        else:
            origin = (
                f"gang from {ref}: {ref.kind.value}s are not readable here (CRD not installed, "
                "or no RBAC to list them), so its pods are placed as they come"
            )
    else:
        errors.extend(e for e in owner.errors if e not in errors)
        options = owner.options
        priority_class = owner.priority_class
        wanted = owner.whole_size if grouping is Grouping.WHOLE else None
        size = wanted or owner.size(claim.part) or 1
        job = child_job(ref, claim.part)
        child = snapshot.owners.get(job) if job is not None else None
        if child is not None and child.whole_size:
            size = min(size, child.whole_size)  # a JobSet's Job near its end
        if grouping is not Grouping.REPLICA:
            group = _owner_group(ref, owner, claim.part, config=config, memo=memo)
        if key != claim.key:  # a Job's gang under the name of the PodGroup made for it
            group = tuple(sorted(key if g == claim.key else g for g in group))
        origin = f"gang from {ref}: {owner.shape}"

    def stated(field: str) -> Any:
        value = _agreed(getattr(c, field) for c in claims)
        return value if value is not None else getattr(options, field)

    min_member = stated("min_available") or size
    total = stated("total_number") or min_member
    if min_member > total:
        errors.append(
            f"min-available ({min_member}) is greater than total-number ({total}); "
            "the gang could never be complete"
        )
    # Constraints do not hash (they hold maps): the first member that states them counts.
    constraints = next((c.constraints for c in claims if c.constraints is not None), None)
    if constraints is None:
        constraints = options.constraints
    named = stated("groups")
    return Gang(
        key=key,
        min_member=min_member,
        total=total,
        mode=Mode.STRICT if constraints is not None else (stated("mode") or Mode.STRICT),
        timeout_seconds=float(stated("waiting_seconds") or config.default_timeout_seconds),
        created=min(p.created for p in pods),
        group=tuple(sorted({*group, *named})) if named else group,
        members=tuple(pods),
        errors=tuple(errors),
        constraints=constraints,
        starvation_seconds=stated("starvation_seconds"),
        expected_seconds=stated("expected_seconds"),
        stale_seconds=stated("stale_seconds"),
        priority=_class_value(priority_class, snapshot.priority_classes),
        origin=origin,
        min_resources=owner.min_resources if owner is not None else None,
        queue=_queue(pods),
        network_topology=stated("network_topology"),
    )


def _owned(claims: list[GangClaim], podgroup: PodGroup | None) -> list[GangClaim]:
    """The owner claims a gang is placed by: its pods' own, where their owner makes the gang;
    and their owner's, where their PodGroup is the basic one their own Job's controller made
    for them (1.37's WorkloadWithJob gives every Job one, unless the Job asks for a gang in
    its spec.scheduling). Such a PodGroup is the controller's default and says nothing of
    gangs, so the Job's pods count as they do without it (an Indexed Job is a gang; a work
    queue's pods go one by one). Empty otherwise: a PodGroup someone chose is the gang."""
    if claims[0].source is GangSource.OWNER:
        return claims
    if (
        claims[0].source is not GangSource.WORKLOAD
        or podgroup is None
        or not podgroup.basic
        or not podgroup.made_by_job
    ):
        return []
    job = OwnerKey(podgroup.key.namespace, OwnerKind.JOB, podgroup.made_by_job)
    defaults = [c.fallback for c in claims if c.fallback is not None and c.fallback.owner == job]
    return defaults if len(defaults) == len(claims) else []


def _owner_group(
    ref: OwnerKey,
    owner: Owner,
    part: str,
    *,
    config: Config,
    memo: dict[tuple[OwnerKey, int], tuple[GangKey, ...]],
) -> tuple[GangKey, ...]:
    """The GangGroup of an owner's part, without parts another scheduler places. Built once
    per owner and group in a pass (a JobSet of R replicas: R gangs share one tuple), so that
    resolving it, and checking its consent, is not quadratic in R."""
    parts = owner.together.get(part, (part,))
    found = memo.get((ref, id(parts)))
    if found is None:
        names = config.scheduler_names
        ours = [p for p in parts if owner.schedulers.get(p, "") in ("", *names)]
        found = tuple(
            sorted(GangKey(ref.namespace, gang_name(ref.kind, ref.name, p)) for p in ours)
        )
        memo[(ref, id(parts))] = found
    key = GangKey(ref.namespace, gang_name(ref.kind, ref.name, part))
    return found if key in found else (key,)


def _class_value(name: str, classes: Mapping[str, PriorityClass]) -> int | None:
    named = classes.get(name) if name else None
    return named.value if named is not None else None


def _priority(podgroup: PodGroup | None, classes: Mapping[str, PriorityClass]) -> int | None:
    """A Volcano or upstream PodGroup's own priority (spec.priority as admission resolved
    it, else its priorityClassName), over its pods'. A class that does not exist counts as
    not stated, as Volcano treats it."""
    if podgroup is not None and podgroup.priority is not None:
        return podgroup.priority
    if podgroup is None or not podgroup.priority_class:
        return None
    named = classes.get(podgroup.priority_class)
    return named.value if named is not None else None


def _with_consent(gangs: Mapping[GangKey, Gang]) -> dict[GangKey, Gang]:
    """Gangs whose GangGroup is not mutual leave it: a gang that names another which names a
    different group (or none) is invalid, alone, and says which gang did not name it back.
    A named gang without pods yet is waited for (see Readiness.why_not_ready), not refused."""
    agreed: dict[GangKey, Gang] = {}
    # The gangs of an owner share one group tuple: judged once per tuple, not per gang (a
    # JobSet of R replicas would cost R^3 comparisons of R-long tuples).
    verdicts: dict[int, list[GangKey]] = {}
    for key, gang in gangs.items():
        refusing = verdicts.get(id(gang.group))
        if refusing is None:
            group = gang.group
            refusing = [
                other
                for other in group
                if other in gangs
                and gangs[other].group is not group
                and gangs[other].group != group
            ]
            verdicts[id(group)] = refusing
        if not refusing:
            agreed[key] = gang
            continue
        stated = ", ".join(map(str, gang.group))
        why = "; ".join(
            f"gang {other} does not name {key} back (its {names.KOORD_GROUPS} is "
            f"[{', '.join(map(str, gangs[other].group))}])"
            for other in refusing
        )
        error = (
            f"GangGroup [{stated}] is not mutual: {why}; a GangGroup forms only when every "
            f"gang in it names the same groups, so add the same {names.KOORD_GROUPS} to "
            f"each of them, or remove the others from {key}'s"
        )
        agreed[key] = replace(gang, group=(key,), errors=(*gang.errors, error))
    return agreed


def _sakkara_gang(key: GangKey, pods: list[Pod], snapshot: Snapshot, config: Config) -> Gang:
    """A Sakkara group: its ConfigMap says the size, priority and constraints."""
    group = snapshot.groups.get(key)
    errors = [e for p in pods if p.gang for e in p.gang.errors]
    size = group.size if group else len(pods)
    return Gang(
        key=key,
        min_member=size,
        total=size,
        mode=Mode.STRICT,
        timeout_seconds=config.default_timeout_seconds,
        created=min(p.created for p in pods),
        group=(key,),
        members=tuple(pods),
        errors=tuple(dict.fromkeys([*errors, *(group.errors if group else ())])),
        constraints=group.constraints if group else None,
        sakkara=group,
        priority=group.priority if group else None,
        queue=_queue(pods),
    )


def gang_groups(gangs: Mapping[GangKey, Gang]) -> list[tuple[GangKey, ...]]:
    """The GangGroups: gangs joined whenever one names another, transitively."""
    parent: dict[GangKey, GangKey] = {}

    def root(key: GangKey) -> GangKey:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for gang in gangs.values():
        for other in gang.group:
            a, b = root(gang.key), root(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    units: dict[GangKey, list[GangKey]] = {}
    for key in parent:
        units.setdefault(root(key), []).append(key)
    return [tuple(sorted(keys)) for keys in units.values()]


def queue_key(gang: Gang, classes: Mapping[str, PriorityClass]) -> tuple:
    """Koordinator's queue order: higher priority first, then the older gang, then by name."""
    pending = [p for p in gang.members if not p.bound] or list(gang.members)
    priority = (
        gang.priority
        if gang.priority is not None
        else max(priority_of(p, classes) for p in pending)
    )
    return (-priority, gang.created, gang.key)
