"""kube-scheduler's VolumeBinding for one pod on one node, as plain data: which of its
claims are bound and may be reached from the node, which unbound ones (of a
WaitForFirstConsumer class) an existing volume would take, and which must have a volume made
there. The shell writes what it decides (a volume's claimRef, a claim's selected-node) and
binds the pod only once every claim is bound.

Ported from kube-scheduler v1.36 (``volumebinding/binder.go``: ``GetPodVolumeClaims``,
``FindPodVolumes``, ``findMatchingVolumes``, ``checkVolumeProvisions``) and
component-helpers (``FindMatchingVolume``, scheduler path: a node is always given, so an
unbound volume may be chosen). Storage capacity (CSIStorageCapacity) is not checked: a
class's provisioner is assumed to have room, as kube-scheduler assumes for drivers that do
not publish their capacity."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from scheduler.core.filtering import selector_matches, term_holds
from scheduler.core.volume_limits import limit_reason
from scheduler.model.nodes import Node
from scheduler.model.pods import Pod, PodRef
from scheduler.model.volumes import (
    AVAILABLE,
    Claim,
    CsiNode,
    StorageClass,
    Volume,
    VolumeAttachment,
)

# kube-scheduler's ConflictReasons, word for word.
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
VOLUME_MISSING = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
# Its PreFilter's, for a pod that no node can take until a controller acts.
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod's claims sorted as ``GetPodVolumeClaims`` sorts them."""

    bound: tuple[Claim, ...] = ()
    # Unbound, of a WaitForFirstConsumer class: the scheduler's to bind or have provisioned.
    delayed: tuple[Claim, ...] = ()
    # Unbound otherwise (an Immediate class, none, or pre-bound to a volume by name): the PV
    # controller's to bind; the pod waits until it has.
    immediate: tuple[Claim, ...] = ()


@dataclass(frozen=True, slots=True)
class VolumePlan:
    """What placing a pod on a node takes of storage: existing volumes to bind to its
    claims (``bindings``: claim, volume), and claims whose volume is to be made there."""

    bindings: tuple[tuple[Claim, Volume], ...] = ()
    provisions: tuple[Claim, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.bindings or self.provisions)


EMPTY = VolumePlan()


def pod_claims(
    pod: Pod,
    *,
    claims: Mapping[tuple[str, str], Claim],
    classes: Mapping[str, StorageClass],
) -> PodClaims | str:
    """The pod's claims, sorted, or why none of its nodes can be judged yet (a claim not
    found or being deleted, in kube-scheduler's PreFilter words)."""
    bound: list[Claim] = []
    delayed: list[Claim] = []
    immediate: list[Claim] = []
    for name in pod.claims:
        claim = claims.get((pod.ref.namespace, name))
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim.deleting:
            return f'persistentvolumeclaim "{name}" is being deleted'
        if claim.fully_bound:
            bound.append(claim)
            continue
        storage_class = classes.get(claim.storage_class)
        waits = storage_class is not None and storage_class.waits_for_first_consumer
        if waits and not claim.volume:
            delayed.append(claim)
        else:
            immediate.append(claim)
    return PodClaims(tuple(bound), tuple(delayed), tuple(immediate))


def matching_volume(
    claim: Claim, volumes: Iterable[Volume], *, node: Node, taken: Container[str] = ()
) -> Volume | None:
    """The volume to bind ``claim`` to on ``node``: one pre-bound to it (None if that one
    cannot be reached from the node), else the smallest that serves it, is Available, and
    is neither ``taken`` nor out of the node's reach."""
    smallest: Volume | None = None
    for volume in volumes:
        if volume.name in taken:
            continue
        if volume.claim is not None and not volume.claim.names(claim):
            continue
        if volume.capacity < claim.requested:
            continue
        if volume.block != claim.block:
            continue
        if volume.attributes_class != claim.attributes_class:
            continue
        if volume.deleting:
            continue
        reachable = _reachable(volume, node)
        if volume.claim is not None:  # pre-bound to this claim
            return volume if reachable else None
        if volume.phase != AVAILABLE:
            # One about to become Available would match, but binding it now is likely to
            # fail on a conflict.
            continue
        if claim.selector is not None and not selector_matches(claim.selector, volume.labels):
            continue
        if volume.storage_class != claim.storage_class or not reachable:
            continue
        if not claim.access_modes <= volume.access_modes:
            continue
        if smallest is None or volume.capacity < smallest.capacity:
            smallest = volume
    return smallest


def plan_volumes(
    claims: PodClaims,
    *,
    node: Node,
    volumes: Mapping[str, Volume],
    classes: Mapping[str, StorageClass],
    by_class: Mapping[str, tuple[Volume, ...]],
    taken: Container[str] = (),
) -> VolumePlan | tuple[str, ...]:
    """``FindPodVolumes``: the pod's plan on ``node``, or kube-scheduler's reasons why the
    node will not do. ``by_class`` lists the volumes of each class, in a fixed order;
    ``taken``: volumes chosen for other pods not yet bound."""
    reasons: list[str] = []
    for claim in claims.bound:
        volume = volumes.get(claim.volume)
        if volume is None:
            return (VOLUME_MISSING,)
        if not _reachable(volume, node):
            reasons.append(NODE_CONFLICT)
            break
    if not claims.delayed:
        return tuple(reasons) or EMPTY
    to_match: list[Claim] = []
    to_make: list[Claim] = []
    for claim in claims.delayed:
        if claim.selected_node is not None:
            if claim.selected_node != node.name:
                return (*reasons, BIND_CONFLICT)  # asked to be made elsewhere
            to_make.append(claim)
        else:
            to_match.append(claim)
    bindings: list[tuple[Claim, Volume]] = []
    chosen = _Either(taken, set())
    satisfied = True
    for claim in sorted(to_match, key=lambda c: c.requested):
        volume = matching_volume(
            claim, by_class.get(claim.storage_class, ()), node=node, taken=chosen
        )
        if volume is None:
            to_make.append(claim)
            satisfied = False
            continue
        chosen.mine.add(volume.name)
        bindings.append((claim, volume))
    if to_make:
        satisfied = all(_may_provision(claim, node=node, classes=classes) for claim in to_make)
    if not satisfied:
        reasons.append(BIND_CONFLICT)
    if reasons:
        return tuple(reasons)
    return VolumePlan(tuple(bindings), tuple(to_make))


class _Either:
    """Volumes taken before (by other pods), or by this pod's claims so far."""

    __slots__ = ("before", "mine")

    def __init__(self, before: Container[str], mine: set[str]) -> None:
        self.before, self.mine = before, mine

    def __contains__(self, name: object) -> bool:
        return name in self.mine or name in self.before


def _may_provision(claim: Claim, *, node: Node, classes: Mapping[str, StorageClass]) -> bool:
    """``checkVolumeProvisions`` for one claim: its class provisions, and may make its
    volume where the node is."""
    storage_class = classes.get(claim.storage_class)
    if storage_class is None or not storage_class.provisions:
        return False
    topologies = storage_class.allowed_topologies
    # An empty term selects no node; an empty list, every node.
    return not topologies or any(
        term.match and all(node.labels.get(key) in values for key, values in term.match)
        for term in topologies
    )


def _reachable(volume: Volume, node: Node) -> bool:
    return not volume.node_affinity or any(term_holds(t, node) for t in volume.node_affinity)


class VolumeWorld:
    """A pass's storage, for the pods whose claims wait for their first consumer: their
    claims sorted once, the volumes of each class in a fixed order."""

    def __init__(
        self,
        *,
        claims: Mapping[tuple[str, str], Claim],
        volumes: Mapping[str, Volume],
        classes: Mapping[str, StorageClass],
        csi_nodes: Mapping[str, CsiNode] = MappingProxyType({}),
        attachments: Iterable[VolumeAttachment] = (),
    ) -> None:
        self.claims = claims
        self.volumes = volumes
        self.classes = classes
        # Nodes with CSI attach limits, and the volumes attached to each.
        self.csi_nodes = {name: n for name, n in csi_nodes.items() if n.limits}
        self.attachments: dict[str, list[VolumeAttachment]] = {}
        for attachment in attachments:
            self.attachments.setdefault(attachment.node, []).append(attachment)
        by_class: dict[str, list[Volume]] = {}
        for name in sorted(volumes):
            volume = volumes[name]
            by_class.setdefault(volume.storage_class, []).append(volume)
        self.by_class = {k: tuple(v) for k, v in by_class.items()}
        self._sorted: dict[PodRef, PodClaims | str] = {}

    def sorted_claims(self, pod: Pod) -> PodClaims | str:
        known = self._sorted.get(pod.ref)
        if known is None:
            known = self._sorted[pod.ref] = pod_claims(
                pod, claims=self.claims, classes=self.classes
            )
        return known

    def asks(self, pod: Pod) -> bool:
        """Whether where ``pod`` may go depends on what this pass places: it binds or
        provisions volumes (an unbound claim of a WaitForFirstConsumer class), or counts
        against nodes' CSI attach limits."""
        if not pod.claims:
            return False
        if self.csi_nodes:
            return True
        claims = self.sorted_claims(pod)
        return not isinstance(claims, str) and bool(claims.delayed)

    def delays(self, pod: Pod) -> bool:
        """Whether ``pod`` has claims whose volumes its placement chooses or has made."""
        if not pod.claims:
            return False
        claims = self.sorted_claims(pod)
        return not isinstance(claims, str) and bool(claims.delayed)

    def limit_reason(self, pod: Pod, node: Node, others: Iterable[Pod]) -> str:
        """NodeVolumeLimits: whether ``pod`` would pass ``node``'s CSI attach limits,
        ``others`` the pods on it."""
        csi_node = self.csi_nodes.get(node.name)
        if csi_node is None:
            return ""
        return limit_reason(
            pod,
            csi_node=csi_node,
            others=others,
            attachments=self.attachments.get(node.name, ()),
            claims=self.claims,
            volumes=self.volumes,
            classes=self.classes,
        )

    def plan(
        self, pod: Pod, node: Node, *, taken: Container[str]
    ) -> VolumePlan | tuple[str, ...] | str:
        claims = self.sorted_claims(pod)
        if isinstance(claims, str):
            return claims
        return plan_volumes(
            claims,
            node=node,
            volumes=self.volumes,
            classes=self.classes,
            by_class=self.by_class,
            taken=taken,
        )


class VolumeLayer:
    """The volumes one ledger's placements chose, on top of its parent's: a scratch
    ledger's layer reaches its parent only when committed, and is forgotten with it."""

    def __init__(self, world: VolumeWorld, parent: VolumeLayer | None = None) -> None:
        self.world = world
        self._parent = parent
        self._taken: set[str] = set()
        self._plans: dict[tuple[PodRef, str], VolumePlan] = {}

    def child(self) -> VolumeLayer:
        return VolumeLayer(self.world, self)

    def __contains__(self, name: object) -> bool:
        """Whether the placements of this layer, or of those below it, chose the volume."""
        layer: VolumeLayer | None = self
        while layer is not None:
            if name in layer._taken:
                return True
            layer = layer._parent
        return False

    def plan(self, pod: Pod, node: Node) -> VolumePlan | tuple[str, ...] | str:
        """What placing ``pod`` on ``node`` binds and provisions, or why it cannot."""
        return self.world.plan(pod, node, taken=self)

    def reasons(self, pod: Pod, node: Node) -> tuple[str, ...]:
        """Why ``pod``'s volumes cannot be had on ``node``; () if they can."""
        if not self.world.delays(pod):
            return ()
        plan = self.plan(pod, node)
        if isinstance(plan, VolumePlan):
            return ()
        return (plan,) if isinstance(plan, str) else plan

    def place(self, pod: Pod, node: Node) -> str:
        """Choose ``pod``'s volumes on ``node``; returns why it cannot ("" when done)."""
        if not self.world.delays(pod):
            return ""
        plan = self.plan(pod, node)
        if not isinstance(plan, VolumePlan):
            return plan if isinstance(plan, str) else plan[0]
        self._plans[(pod.ref, node.name)] = plan
        self._taken.update(volume.name for _, volume in plan.bindings)
        return ""

    def unplace(self, pod: Pod, node: str) -> None:
        plan = self._plans.pop((pod.ref, node), None)
        if plan is not None:
            self._taken.difference_update(volume.name for _, volume in plan.bindings)

    def plan_of(self, ref: PodRef, node: str) -> VolumePlan | None:
        own = self._plans.get((ref, node))
        if own is not None:
            return own
        return self._parent.plan_of(ref, node) if self._parent is not None else None

    def commit(self) -> None:
        parent = self._parent
        if parent is None:
            raise ValueError("only a child layer can be committed")
        parent._taken.update(self._taken)
        parent._plans.update(self._plans)
        self._taken, self._plans = set(), {}
