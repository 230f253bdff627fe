"""kube-scheduler's VolumeBinding for one pod on one node, as plain data: which of its
claims are bound and may be reached from the node, which unbound ones (of a
WaitForFirstConsumer class) an existing volume would take, and which must have a volume made
there. The shell writes what it decides (a volume's claimRef, a claim's selected-node) and
binds the pod only once every claim is bound.

Ported from kube-scheduler v1.36 (``volumebinding/binder.go``: ``GetPodVolumeClaims``,
``FindPodVolumes``, ``findMatchingVolumes``, ``checkVolumeProvisions``) and
component-helpers (``FindMatchingVolume``, scheduler path: a node is always given, so an
unbound volume may be chosen), with ``hasEnoughCapacity``: a volume is made only where a
CSIStorageCapacity of its class says there is room, for drivers that publish their capacity.
Unlike kube-scheduler, which weighs each pod alone, the volumes a pass has asked to be made
count against the capacity they were checked against: a gang's members do not all count on
the same free space."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from scheduler.core.filtering import named_claim, selector_matches, term_holds
from scheduler.core.volume_limits import limit_reason
from scheduler.model.nodes import Node
from scheduler.model.pods import Pod, PodRef
from scheduler.model.volumes import (
    AVAILABLE,
    Claim,
    CsiDriver,
    CsiNode,
    StorageCapacity,
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
    # The bytes the provisions newly take of each published capacity (by its key).
    capacities: tuple[tuple[tuple[str, str], int], ...] = ()

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
        claim = named_claim(pod, name, claims)
        if isinstance(claim, str):
            return claim
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
        if volume.name in taken or not _may_serve(volume, claim):
            continue
        near = reachable(volume, node)
        if volume.claim is not None:  # pre-bound to this claim
            return volume if near else None
        if volume.phase != AVAILABLE:
            # One about to become Available would match, but binding it now is likely to
            # fail on a conflict.
            continue
        if claim.selector is not None and not selector_matches(claim.selector, volume.labels):
            continue
        if volume.storage_class != claim.storage_class or not near:
            continue
        if not claim.access_modes <= volume.access_modes:
            continue
        if smallest is None or volume.capacity < smallest.capacity:
            smallest = volume
    return smallest


class Choices:
    """What a pass chose for claims not bound yet: none (a what-if on its own)."""

    def __contains__(self, name: object) -> bool:
        """Whether a volume was chosen for some claim."""
        return False

    def volume_for(self, key: tuple[str, str]) -> Volume | None:
        return None

    def node_for(self, key: tuple[str, str]) -> str | None:
        """The node a claim's volume is to be made on."""
        return None

    def capacity_used(self, key: tuple[str, str]) -> int:
        """How many bytes of a published capacity the volumes asked for take."""
        return 0


NO_CHOICES = Choices()


class Capacities:
    """The storage capacity CSI drivers publish, for the drivers that opt in."""

    def __init__(
        self, drivers: Mapping[str, CsiDriver], capacities: Iterable[StorageCapacity]
    ) -> None:
        self.publishing = frozenset(name for name, d in drivers.items() if d.storage_capacity)
        self.by_class: dict[str, list[StorageCapacity]] = {}
        for capacity in sorted(capacities, key=lambda c: c.key):
            self.by_class.setdefault(capacity.storage_class, []).append(capacity)

    def room_for(
        self,
        claim: Claim,
        storage_class: StorageClass,
        node: Node,
        *,
        used: Callable[[tuple[str, str]], int],
    ) -> tuple[str, str] | bool:
        """``hasEnoughCapacity``: True where nothing is to be checked (no size asked, a
        driver that publishes no capacity), else the key of the first capacity of its class
        that reaches ``node`` and holds it (what ``used`` says is taken counted), or False."""
        size = claim.requested
        if not size or storage_class.provisioner not in self.publishing:
            return True
        for capacity in self.by_class.get(storage_class.name, ()):
            limit = capacity.maximum_volume_size
            if limit is None:
                limit = capacity.capacity
            if limit is None or limit < size:
                continue
            # What this pass asked of it is no longer there; with nothing asked yet the
            # answer is kube-scheduler's alone (which weighs a maximumVolumeSize larger
            # than the capacity, as a driver may publish it, over the capacity).
            taken = used(capacity.key)
            if taken and capacity.capacity is not None and capacity.capacity - taken < size:
                continue
            if selector_matches(capacity.node_topology, node.labels):
                return capacity.key
        return False


NO_CAPACITIES = Capacities({}, ())


def plan_volumes(
    claims: PodClaims,
    *,
    node: Node,
    volumes: Mapping[str, Volume],
    classes: Mapping[str, StorageClass],
    by_class: Mapping[str, tuple[Volume, ...]],
    taken: Choices = NO_CHOICES,
    capacities: Capacities = NO_CAPACITIES,
    prebound: Mapping[tuple[str, str], tuple[Volume, ...]] = MappingProxyType({}),
) -> VolumePlan | tuple[str, ...]:
    """``FindPodVolumes``: the pod's plan on ``node``, or kube-scheduler's reasons why the
    node will not do. ``by_class`` lists the volumes of each class, in a fixed order;
    ``taken``: what this pass chose for claims not bound yet (kube-scheduler's assume cache
    shows them so): a volume chosen for a claim is no other claim's, and a claim shared
    with a pod placed before keeps the volume, or the node, chosen for it then.
    ``prebound``: the volumes whose claimRef names a claim, by the claim's key."""
    reasons: list[str] = []
    for claim in claims.bound:
        volume = volumes.get(claim.volume)
        if volume is None:
            return (VOLUME_MISSING,)
        if not reachable(volume, node):
            reasons.append(NODE_CONFLICT)
            break
    if not claims.delayed:
        return tuple(reasons) or EMPTY
    to_match: list[Claim] = []
    to_make: list[Claim] = []
    bindings: list[tuple[Claim, Volume]] = []
    satisfied = True
    for claim in claims.delayed:
        selected = claim.selected_node
        if selected is None:
            selected = taken.node_for(claim.key)
        if selected is not None:
            if selected != node.name:
                return (*reasons, BIND_CONFLICT)  # asked to be made elsewhere
            to_make.append(claim)
        elif (volume := taken.volume_for(claim.key)) is not None:
            # As a volume pre-bound to it: there, or nowhere.
            if reachable(volume, node):
                bindings.append((claim, volume))
            else:
                satisfied = False
        else:
            to_match.append(claim)
    chosen = _Either(taken, set())
    for claim in sorted(to_match, key=lambda c: c.requested):
        volume = matching_volume(
            claim, by_class.get(claim.storage_class, ()), node=node, taken=chosen
        )
        if volume is None:
            if _made_for_elsewhere(claim, prebound.get(claim.key, ()), node):
                # kube-scheduler would ask for another volume here, and fail at PreBind once
                # the PV controller binds the claim to the one made for it: ask nothing.
                return (NODE_CONFLICT,)  # the only reason there may be before it
            to_make.append(claim)
            satisfied = False
            continue
        chosen.mine.add(volume.name)
        bindings.append((claim, volume))
    taking: list[tuple[tuple[str, str], int]] = []
    sufficient = True
    if to_make:
        satisfied, sufficient = _may_provision(
            to_make, node=node, classes=classes, capacities=capacities, taken=taken, into=taking
        )
    if not satisfied:
        reasons.append(BIND_CONFLICT)
    if not sufficient:
        reasons.append(NOT_ENOUGH_SPACE)
    if reasons:
        return tuple(reasons)
    return VolumePlan(tuple(bindings), tuple(to_make), tuple(taking))


def _may_serve(volume: Volume, claim: Claim) -> bool:
    """``FindMatchingVolume``'s checks before the node's: free or pre-bound to ``claim``,
    large enough, of its mode and attributes class, and not going."""
    if volume.errors or volume.deleting:
        return False
    if volume.claim is not None and not volume.claim.names(claim):
        return False
    return (
        volume.capacity >= claim.requested
        and volume.block == claim.block
        and volume.attributes_class == claim.attributes_class
    )


def _made_for_elsewhere(claim: Claim, prebound: Iterable[Volume], node: Node) -> bool:
    """Whether the PV controller will bind ``claim`` to a volume pre-bound to it (its
    claimRef names it: its provisioner made it for the claim, or a user pre-bound them),
    whatever selected-node the claim is given, and none such can be reached from ``node``.
    It takes one of any class whose access modes cover the claim's (``findByClaim``)."""
    serving = [
        v
        for v in prebound
        if v.claim is not None
        and v.claim.names(claim)
        and _may_serve(v, claim)
        and claim.access_modes <= v.access_modes
    ]
    return bool(serving) and not any(reachable(v, node) for v in serving)


class _Either:
    """Volumes taken before (by other pods), or by this pod's claims so far."""

    __slots__ = ("before", "mine")

    def __init__(self, before: Container[str], mine: set[str]) -> None:
        self.before, self.mine = before, mine

    def __contains__(self, name: object) -> bool:
        return name in self.mine or name in self.before


def _may_provision(
    claims: list[Claim],
    *,
    node: Node,
    classes: Mapping[str, StorageClass],
    capacities: Capacities,
    taken: Choices,
    into: list[tuple[tuple[str, str], int]],
) -> tuple[bool, bool]:
    """``checkVolumeProvisions``: (whether each claim's class provisions and may make its
    volume where the node is, whether there is room for it), the first claim that fails
    deciding. What each claim newly made takes of a published capacity goes ``into``; what
    the pass's earlier placements took counts against it (``taken``), not what this pod's
    other claims take: for one pod the answer is kube-scheduler's, claim by claim."""
    for claim in claims:
        storage_class = classes.get(claim.storage_class)
        if storage_class is None or not storage_class.provisions:
            return False, True
        topologies = storage_class.allowed_topologies
        # An empty term selects no node; an empty list, every node.
        if topologies and not any(
            term.match and all(node.labels.get(key) in values for key, values in term.match)
            for term in topologies
        ):
            return False, True
        if taken.node_for(claim.key) is not None:
            continue  # chosen in this pass, its room counted then
        room = capacities.room_for(claim, storage_class, node, used=taken.capacity_used)
        if room is False:
            return True, False
        if isinstance(room, tuple) and claim.selected_node is None:
            into.append((room, claim.requested))
    return True, True


def reachable(volume: Volume, node: Node) -> bool:
    """Whether ``volume``'s node affinity lets ``node`` reach it."""
    return not volume.node_affinity or any(term_holds(t, node) for t in volume.node_affinity)


class VolumeWorld:
    """A pass's storage, for the pods whose claims wait for their first consumer: their
    claims sorted once, the volumes of each class in a fixed order (sorted when a pod first
    asks), and the nodes' CSI attach limits."""

    def __init__(
        self,
        *,
        claims: Mapping[tuple[str, str], Claim],
        volumes: Mapping[str, Volume],
        classes: Mapping[str, StorageClass],
        csi_nodes: Mapping[str, CsiNode] = MappingProxyType({}),
        attachments: Iterable[VolumeAttachment] = (),
        capacities: Capacities = NO_CAPACITIES,
    ) -> None:
        self.capacities = capacities
        self.claims = claims
        self.volumes = volumes
        self.classes = classes
        # Nodes with CSI attach limits, and the volumes attached to each.
        self.csi_nodes = {name: n for name, n in csi_nodes.items() if n.limits}
        self.attachments: dict[str, list[VolumeAttachment]] = {}
        for attachment in attachments:
            self.attachments.setdefault(attachment.node, []).append(attachment)
        self._sorted: dict[PodRef, PodClaims | str] = {}

    @cached_property
    def prebound(self) -> dict[tuple[str, str], tuple[Volume, ...]]:
        """The volumes whose claimRef names a claim, by that claim's key."""
        found: dict[tuple[str, str], list[Volume]] = {}
        for name in sorted(self.volumes):
            volume = self.volumes[name]
            if volume.claim is not None:
                found.setdefault((volume.claim.namespace, volume.claim.name), []).append(volume)
        return {k: tuple(v) for k, v in found.items()}

    @cached_property
    def by_class(self) -> dict[str, tuple[Volume, ...]]:
        by_class: dict[str, list[Volume]] = {}
        for name in sorted(self.volumes):
            volume = self.volumes[name]
            by_class.setdefault(volume.storage_class, []).append(volume)
        return {k: tuple(v) for k, v in by_class.items()}

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
        return bool(self.csi_nodes) or self.delays(pod)

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

    def plan(self, pod: Pod, node: Node, *, taken: Choices) -> VolumePlan | tuple[str, ...] | str:
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
            capacities=self.capacities,
            prebound=self.prebound,
        )


class VolumeLayer(Choices):
    """What one ledger's placements chose for claims not bound yet, over its parent's: a
    scratch ledger's layer reaches its parent only when committed, and is forgotten with
    it. Two pods sharing a claim share its choice (counted, so that one placement undone
    leaves the other's). A layer may set aside choices below it (``set_aside``: a
    preemptor's own held room, its to use again in a what-if)."""

    def __init__(self, world: VolumeWorld, parent: VolumeLayer | None = None) -> None:
        self.world = world
        self._parent = parent
        self._volumes: dict[tuple[str, str], Volume] = {}  # claim -> volume chosen
        self._nodes: dict[tuple[str, str], str] = {}  # claim -> node its volume is made on
        self._holders: dict[str, tuple[str, str]] = {}  # volume -> its claim
        self._uses: Counter[tuple[str, str]] = Counter()  # placements relying on a choice
        self._aside: set[tuple[str, str]] = set()  # claims whose choice below is set aside
        self._used: Counter[tuple[str, str]] = Counter()  # bytes of published capacities
        self._plans: dict[tuple[PodRef, str], VolumePlan] = {}
        self._pending: dict[tuple[PodRef, str], VolumePlan | tuple[str, ...] | str] = {}

    def child(self) -> VolumeLayer:
        return VolumeLayer(self.world, self)

    def asks(self, pod: Pod) -> bool:
        """Whether placing ``pod`` binds or provisions volumes."""
        return self.world.asks(pod)

    # -- Choices: what the layers from this one down chose ---------------------------------

    def _find(self, table: str, key: object) -> object:
        aside: set[tuple[str, str]] = set()
        layer: VolumeLayer | None = self
        while layer is not None:
            found = getattr(layer, table).get(key)
            if found is not None:
                claim = found if table == "_holders" else key
                return None if claim in aside else found
            aside |= layer._aside
            layer = layer._parent
        return None

    def __contains__(self, name: object) -> bool:
        return self._find("_holders", name) is not None

    def volume_for(self, key: tuple[str, str]) -> Volume | None:
        return self._find("_volumes", key)  # type: ignore[return-value]

    def node_for(self, key: tuple[str, str]) -> str | None:
        return self._find("_nodes", key)  # type: ignore[return-value]

    def capacity_used(self, key: tuple[str, str]) -> int:
        used = 0
        layer: VolumeLayer | None = self
        while layer is not None:
            used += layer._used.get(key, 0)
            layer = layer._parent
        return used

    # -- plans -------------------------------------------------------------------------------

    def plan(self, pod: Pod, node: Node) -> VolumePlan | tuple[str, ...] | str:
        """What placing ``pod`` on ``node`` binds and provisions, or why it cannot. Kept
        until this layer's choices change."""
        key = (pod.ref, node.name)
        known = self._pending.get(key)
        if known is None:
            known = self._pending[key] = self.world.plan(pod, node, taken=self)
        return known

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
        self._pending.clear()
        self._plans[(pod.ref, node.name)] = plan
        for claim, volume in plan.bindings:
            self._use(claim.key)
            self._volumes[claim.key] = volume
            self._holders[volume.name] = claim.key
        for claim in plan.provisions:
            self._use(claim.key)
            self._nodes[claim.key] = node.name
        for key, size in plan.capacities:
            self._used[key] += size
        return ""

    def _use(self, key: tuple[str, str]) -> None:
        self._uses[key] += 1
        self._aside.discard(key)

    def unplace(self, pod: Pod, node: str) -> None:
        plan = self._plans.pop((pod.ref, node), None)
        if plan is None:
            return
        self._pending.clear()
        for claim in (*(c for c, _ in plan.bindings), *plan.provisions):
            self._uses[claim.key] -= 1
            if self._uses[claim.key] <= 0:  # no other pod placed here shares the claim
                self._drop(claim.key)
        for key, size in plan.capacities:
            self._used[key] -= size

    def _drop(self, key: tuple[str, str]) -> None:
        self._uses.pop(key, None)
        self._nodes.pop(key, None)
        volume = self._volumes.pop(key, None)
        if volume is not None:
            self._holders.pop(volume.name, None)

    def evict(self, pod: Pod) -> None:
        """A victim's bound volumes stay its claims': nothing to choose again."""

    def unevict(self, pod: Pod) -> None:
        pass

    def set_aside(self, pod: Pod, node: str) -> None:
        """Treat the choices made below for ``pod`` on ``node`` as not made, on this layer."""
        plan = self.plan_of(pod.ref, node)
        if plan is None:
            return
        self._pending.clear()
        self._aside.update(c.key for c in (*(c for c, _ in plan.bindings), *plan.provisions))
        for key, size in plan.capacities:
            self._used[key] -= size

    def plan_of(self, ref: PodRef, node: str) -> VolumePlan | None:
        own = self._plans.get((ref, node))
        if own is not None:
            return own
        return self._parent.plan_of(ref, node) if self._parent is not None else None

    def commit(self) -> None:
        parent = self._parent
        if parent is None:
            raise ValueError("only a child layer can be committed")
        for key in self._aside:  # set aside here, and not chosen again
            parent._drop(key)
            parent._aside.add(key)
        parent._volumes.update(self._volumes)
        parent._nodes.update(self._nodes)
        parent._holders.update(self._holders)
        parent._uses.update(self._uses)
        parent._used.update(self._used)
        parent._plans.update(self._plans)
        parent._pending.clear()
        self._volumes, self._nodes, self._holders = {}, {}, {}
        self._uses, self._aside, self._plans, self._pending = Counter(), set(), {}, {}
        self._used = Counter()
