"""Hierarchies of CompositePodGroups (Kubernetes 1.37's ``scheduling.k8s.io/v1alpha3``): a
PodGroup that names a parent belongs, with every PodGroup under the same root, to one
GangGroup that needs a ``Quorum`` placed together, as kube-scheduler's GangScheduling counts
it: a CompositePodGroup is placed once ``minGroupCount`` of its children are, a PodGroup once
``minCount`` of its pods are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.model.gangs import CompositePodGroup, PodGroup, Quorum
from scheduler.model.pods import GangKey, PodGroupApi

# scheduling.k8s.io's WorkloadMaxTreeDepth: a PodGroup and at most three CompositePodGroups
# above it.
MAX_DEPTH = 4


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where a PodGroup stands: the ``quorum`` of its root's tree (None for a PodGroup with
    no parent), or why it cannot be placed: an ``error`` in the tree (a cycle, too deep, an
    invalid CompositePodGroup), or the name of a CompositePodGroup ``missing`` from it (not
    created yet: waited for, as kube-scheduler waits)."""

    quorum: Quorum | None = None
    error: str = ""
    missing: str = ""


def hierarchy_of(
    key: GangKey,
    *,
    podgroups: Mapping[GangKey, PodGroup],
    composites: Mapping[GangKey, CompositePodGroup],
) -> Hierarchy:
    """The hierarchy of the upstream PodGroup ``key``."""
    podgroup = podgroups.get(key)
    if podgroup is None or podgroup.api is not PodGroupApi.WORKLOAD or not podgroup.parent:
        return Hierarchy()
    namespace = key.namespace
    chain: list[GangKey] = []
    name = podgroup.parent
    while name:
        at = GangKey(namespace, name)
        if at in chain:
            path = " -> ".join(k.name for k in (*chain, at))
            return Hierarchy(error=f"CompositePodGroups form a cycle ({path})")
        composite = composites.get(at)
        if composite is None:
            return Hierarchy(missing=name)
        if composite.errors:
            return Hierarchy(
                error=f"CompositePodGroup {name} is invalid: " + "; ".join(composite.errors)
            )
        chain.append(at)
        if len(chain) >= MAX_DEPTH:
            return Hierarchy(
                error=(
                    f"PodGroup {key.name} has more than {MAX_DEPTH - 1} CompositePodGroups "
                    f"above it ({' -> '.join(k.name for k in chain)}); a tree of PodGroups "
                    f"and CompositePodGroups is at most {MAX_DEPTH} levels deep"
                )
            )
        name = composite.parent
    children: dict[str, list[GangKey | str]] = {}
    for other in composites.values():
        if other.key.namespace == namespace and other.parent:
            children.setdefault(other.parent, []).append(other.key.name)
    for pg in podgroups.values():
        if pg.key.namespace == namespace and pg.parent and pg.api is PodGroupApi.WORKLOAD:
            children.setdefault(pg.parent, []).append(pg.key)
    return Hierarchy(quorum=_quorum(composites[chain[-1]], children, composites, depth=1))


def _quorum(
    composite: CompositePodGroup,
    children: Mapping[str, list[GangKey | str]],
    composites: Mapping[GangKey, CompositePodGroup],
    *,
    depth: int,
) -> Quorum:
    """The quorum of ``composite``'s subtree: its PodGroups by key, its CompositePodGroups
    (by name in ``children``) as quorums of their own, deeper than the limit left out (their
    PodGroups are refused when they are tried)."""
    parts: list[GangKey | Quorum] = []
    for child in sorted(children.get(composite.key.name, ()), key=str):
        if isinstance(child, GangKey):
            parts.append(child)
            continue
        nested = composites.get(GangKey(composite.key.namespace, child))
        if nested is not None and depth < MAX_DEPTH - 1:
            parts.append(_quorum(nested, children, composites, depth=depth + 1))
    return Quorum(name=composite.key.name, minimum=composite.min_groups, parts=tuple(parts))


def evicted_whole_with(
    podgroup: PodGroup | None, composites: Mapping[GangKey, CompositePodGroup]
) -> GangKey | None:
    """The highest CompositePodGroup above ``podgroup`` whose ``disruptionMode`` is ``all``:
    preemption evicts every pod under it as one victim, as kube-scheduler's preemption
    does (the highest ancestor asking for it wins); None when none does."""
    if podgroup is None or podgroup.api is not PodGroupApi.WORKLOAD or not podgroup.parent:
        return None
    found = None
    seen: set[str] = set()
    name = podgroup.parent
    while name and name not in seen and len(seen) < MAX_DEPTH:
        seen.add(name)
        composite = composites.get(GangKey(podgroup.key.namespace, name))
        if composite is None:
            break
        if composite.disruption_mode == "all":
            found = composite.key
        name = composite.parent
    return found
