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


class Hierarchies:
    """The CompositePodGroup trees of a snapshot's PodGroups, indexed once: each child by
    its parent, each answer kept by parent (siblings share it), so a pass over thousands
    of PodGroups reads them all once."""

    def __init__(
        self,
        *,
        podgroups: Mapping[GangKey, PodGroup],
        composites: Mapping[GangKey, CompositePodGroup],
    ) -> None:
        self.podgroups = podgroups
        self.composites = composites
        self._children: dict[GangKey, list[GangKey | str]] | None = None
        self._by_parent: dict[GangKey, Hierarchy] = {}

    def of(self, key: GangKey) -> Hierarchy:
        """The hierarchy of the upstream PodGroup ``key``."""
        podgroup = self.podgroups.get(key)
        if podgroup is None or podgroup.api is not PodGroupApi.WORKLOAD or not podgroup.parent:
            return Hierarchy()
        parent = GangKey(key.namespace, podgroup.parent)
        found = self._by_parent.get(parent)
        if found is None:
            found = self._by_parent[parent] = self._above(parent)
        return found

    def _above(self, parent: GangKey) -> Hierarchy:
        namespace = parent.namespace
        chain: list[GangKey] = []
        name = parent.name
        while name:
            at = GangKey(namespace, name)
            if at in chain:
                path = " -> ".join(k.name for k in (*chain, at))
                return Hierarchy(error=f"CompositePodGroups form a cycle ({path})")
            composite = self.composites.get(at)
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
                        f"the PodGroups under CompositePodGroup {parent.name} have more than "
                        f"{MAX_DEPTH - 1} CompositePodGroups above them "
                        f"({' -> '.join(k.name for k in chain)}); a tree of PodGroups and "
                        f"CompositePodGroups is at most {MAX_DEPTH} levels deep"
                    )
                )
            name = composite.parent
        return Hierarchy(quorum=self._quorum(self.composites[chain[-1]], depth=1))

    def _quorum(self, composite: CompositePodGroup, *, depth: int) -> Quorum:
        """The quorum of ``composite``'s subtree: its PodGroups by key, its CompositePodGroups
        as quorums of their own (deeper than the limit left out: their PodGroups are refused
        when they are tried)."""
        parts: list[GangKey | Quorum] = []
        for child in sorted(self.children.get(composite.key, ()), key=str):
            if isinstance(child, GangKey):
                parts.append(child)
                continue
            nested = self.composites.get(GangKey(composite.key.namespace, child))
            if nested is not None and depth < MAX_DEPTH - 1:
                parts.append(self._quorum(nested, depth=depth + 1))
        return Quorum(name=composite.key.name, minimum=composite.min_groups, parts=tuple(parts))

    @property
    def children(self) -> dict[GangKey, list[GangKey | str]]:
        """Each parent's children: PodGroups by key, CompositePodGroups by name."""
        if self._children is None:
            children: dict[GangKey, list[GangKey | str]] = {}
            for composite in self.composites.values():
                if composite.parent:
                    at = GangKey(composite.key.namespace, composite.parent)
                    children.setdefault(at, []).append(composite.key.name)
            for pg in self.podgroups.values():
                if pg.parent and pg.api is PodGroupApi.WORKLOAD:
                    children.setdefault(GangKey(pg.key.namespace, pg.parent), []).append(pg.key)
            self._children = children
        return self._children


def hierarchy_of(
    key: GangKey,
    *,
    podgroups: Mapping[GangKey, PodGroup],
    composites: Mapping[GangKey, CompositePodGroup],
) -> Hierarchy:
    """The hierarchy of the upstream PodGroup ``key`` (one question: ``Hierarchies`` for
    many)."""
    return Hierarchies(podgroups=podgroups, composites=composites).of(key)


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
