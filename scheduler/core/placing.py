"""Where pods fit: a ledger of free capacity with scratch transactions, and a node finder.

A gang is tried on a scratch copy of the ledger (Volcano's statement): every member is taken
from the scratch, and the scratch is either committed whole or dropped. The finder packs:
nodes are visited fullest first (then by name), so gangs fill nodes that are already in use
and leave whole nodes free for the gangs that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from scheduler.core.claiming import ClaimPlan, DeviceWorld
from scheduler.core.device_layer import DeviceLayer
from scheduler.core.filtering import (
    VOLUME_NODE_CONFLICT,
    VolumeTerms,
    static_reason,
    volume_reason,
)
from scheduler.core.neighbouring import PORTS_TAKEN, Check, Neighbours
from scheduler.core.scoring import best_node, fullness, pods_on
from scheduler.core.volume_binding import VolumeLayer, VolumePlan, VolumeWorld
from scheduler.core.volume_restrictions import ExclusiveClaims, ExclusiveLayer
from scheduler.model.devices import Allocation, DeviceId, pod_devices
from scheduler.model.nodes import Node, NodeInfo, node_infos
from scheduler.model.pods import Pod, PodRef
from scheduler.model.resources import Resources
from scheduler.model.status import Status


class PlacementConflict(Exception):
    """A pod placed where its devices or volumes cannot be had (a bug of a placing path, or
    a what-if's placement that is no plan)."""


class Book(Protocol):
    """What a ledger keeps beyond room, layered as the ledger is: a scratch ledger's book is
    a child of its parent's, committed and forgotten with it. Placing a pod asks every book
    that the pod asks anything of, and undoing it undoes it in every one."""

    def asks(self, pod: Pod) -> bool: ...
    def reasons(self, pod: Pod, node: Node) -> tuple[str, ...]: ...
    def place(self, pod: Pod, node: Node) -> str: ...
    def unplace(self, pod: Pod, node: str) -> None: ...
    def evict(self, pod: Pod) -> None: ...
    def unevict(self, pod: Pod) -> None: ...
    def set_aside(self, pod: Pod, node: str) -> None: ...
    def child(self) -> Book: ...
    def commit(self) -> None: ...


class Ledger:
    """Free resources per node, and the books of what placements did beyond room: the
    devices their claims took, the volumes they chose. ``scratch()`` makes a child whose
    changes reach this ledger only on ``commit()``; dropping the child forgets them. A root
    ledger made ``over`` node infos works out a node's free room on first use, so a pass
    that looks at few nodes pays for few."""

    def __init__(self, free: dict[str, dict[str, int]], parent: Ledger | None = None) -> None:
        self._free = free
        self._parent = parent
        # Pods placed on this ledger (not in the snapshot's node infos), for the filters
        # that look at the other pods: anti-affinity, host ports.
        self._placed: list[tuple[Pod, str]] = []
        self._anti = 0  # how many of them carry required anti-affinity
        # Pods evicted on this ledger (a what-if's victims, a turn's): gone from their nodes
        # for the filters that count the pods there (CSI attach limits).
        self._gone: set[str] = set()
        self._nodes: Mapping[str, Node] = {}
        self._infos: Mapping[str, NodeInfo] = {}
        # The books, each None where the pass has nothing of its kind (no ReadWriteOncePod
        # claim, no claim waiting for its first consumer, no device), in kube-scheduler's
        # filter order: VolumeRestrictions, VolumeBinding, DynamicResources.
        self.exclusive: ExclusiveLayer | None = None
        self.volumes: VolumeLayer | None = None
        self.claims: DeviceLayer | None = None
        if parent is not None:
            self.exclusive = parent.exclusive.child() if parent.exclusive is not None else None
            self.volumes = parent.volumes.child() if parent.volumes is not None else None
            self.claims = parent.claims.child() if parent.claims is not None else None
        self._books: tuple[Book, ...] = self._present()

    @classmethod
    def of(cls, nodes: Mapping[str, Node], pods: Iterable[Pod]) -> Ledger:
        """Allocatable minus the requests of every pod that holds resources on a known node."""
        return cls.over(nodes, node_infos(nodes, pods))

    @classmethod
    def over(
        cls,
        nodes: Mapping[str, Node],
        infos: Mapping[str, NodeInfo],
        *,
        devices: DeviceWorld | None = None,
        volumes: VolumeWorld | None = None,
        exclusive: ExclusiveClaims | None = None,
    ) -> Ledger:
        """Allocatable minus what each node's info says is requested, node by node on use."""
        ledger = cls({})
        ledger._nodes, ledger._infos = nodes, infos
        ledger.exclusive = ExclusiveLayer(exclusive) if exclusive is not None else None
        ledger.volumes = VolumeLayer(volumes) if volumes is not None else None
        ledger.claims = DeviceLayer(devices) if devices is not None else None
        ledger._books = ledger._present()
        return ledger

    def _present(self) -> tuple[Book, ...]:
        books = (self.exclusive, self.volumes, self.claims)
        return tuple(book for book in books if book is not None)

    @property
    def devices(self) -> DeviceWorld | None:
        """The pass's devices; None for a what-if of room only (a head's target)."""
        return self.claims.world if self.claims is not None else None

    def free(self, node: str) -> Mapping[str, int]:
        own = self._free.get(node)
        if own is not None:
            return own
        if self._parent is not None:
            return self._parent.free(node)
        known = self._nodes.get(node)
        if known is None:
            return {}
        info = self._infos.get(node)
        room = dict(info.free.amounts) if info is not None else dict(known.allocatable.amounts)
        self._free[node] = room
        return room

    def asks(self, pod: Pod) -> Resources:
        """The pod's requests and the devices its own claims still ask, by class (as a queue
        names them, and as ``room`` counts them): what a unit of a topology must have free
        for it."""
        world = self.devices
        if world is None or not (pod.resource_claims or pod.extended):
            return pod.requests
        requests = world.counted(pod.requests) if pod.extended else pod.requests
        if not pod.resource_claims:
            return requests
        return requests + pod_devices(pod, world.claims, world.classes, asked_only=True)

    def room(self, node: str, asked: Iterable[str]) -> dict[str, int]:
        """``free(node)``, with the free devices counted as each of ``asked`` that devices
        serve (``deviceclass.resource.kubernetes.io/<class>``, or a class's
        ``extendedResourceName``) added: what a topology weighs a member asking devices
        against."""
        room = dict(self.free(node))
        world = self.devices
        if world is None:
            return room
        for resource in asked:
            if world.served(resource):
                # A pod being bound still counts what its claim holds against the node
                # until the watch shows it bound: never below none.
                plain = max(room.get(resource, 0), 0)
                room[resource] = plain + self.free_devices_of(node, resource)
        return room

    def free_devices_of(self, node: str, resource: str) -> int:
        """How many devices counted as ``resource`` that ``node`` reaches no claim holds on
        this ledger (those a what-if gave back are free, those its placements took are
        not)."""
        claims, known = self.claims, self._nodes_root().get(node)
        if claims is None or known is None:
            return 0
        on_node = claims.world.on_node(known, resource)
        return sum(1 for device in on_node if not claims.holds(device))

    def holds(self, device: DeviceId) -> bool:
        """Whether a claim holds ``device`` on this ledger: the snapshot's (unless a what-if
        gave it back) or a placement's."""
        return self.claims is not None and self.claims.holds(device)

    def asks_devices(self, pod: Pod) -> bool:
        """Whether placing ``pod`` may allocate devices (its claims, or its extended
        resources that devices serve)."""
        return self.claims.asks(pod) if self.claims is not None else bool(pod.resource_claims)

    def requests_on(self, pod: Pod, node: str) -> Resources:
        """What of ``pod``'s requests ``node``'s room must hold: its extended resources
        that devices serve there are asked of the devices instead (NodeResourcesFit leaves
        them to the DynamicResources plugin)."""
        world = self.devices
        if not pod.extended or world is None or not world.extended:
            return pod.requests
        target = self._nodes_root().get(node)
        delegated = world.delegated(pod, target) if target is not None else None
        return pod.requests.without(delegated) if delegated else pod.requests

    def fits(self, node: str, requests: Mapping[str, int]) -> bool:
        # The hot loop of a pass: plain dicts, no Mapping protocol, no generator.
        get = self.free(node).get
        amounts = requests.amounts if isinstance(requests, Resources) else requests
        for resource, amount in amounts.items():  # noqa: SIM110
            if get(resource, 0) < amount:
                return False
        return True

    def take(self, node: str, requests: Mapping[str, int]) -> None:
        room = self._free.get(node)
        if room is None:
            room = self._free[node] = dict(self.free(node))
        for resource, amount in requests.items():
            room[resource] = room.get(resource, 0) - amount

    def give(self, node: str, requests: Mapping[str, int]) -> None:
        """Undo a ``take`` (a Statement discarded) or free a victim's share (an eviction)."""
        room = self._free.get(node)
        if room is None:
            room = self._free[node] = dict(self.free(node))
        for resource, amount in requests.items():
            room[resource] = room.get(resource, 0) + amount

    def evict(self, pod: Pod, node: str) -> None:
        """A victim goes: its room is given back, and it is no longer among the node's
        pods (nor among the users of its claims)."""
        self.give(node, pod.requests)
        self._gone.add(pod.ref.uid)
        for book in self._books:
            book.evict(pod)

    def unevict(self, pod: Pod, node: str) -> None:
        """Undo an ``evict`` of this ledger."""
        self.take(node, pod.requests)
        self._gone.discard(pod.ref.uid)
        for book in self._books:
            book.unevict(pod)

    def _evicted(self, uid: str) -> bool:
        ledger: Ledger | None = self
        while ledger is not None:
            if uid in ledger._gone:
                return True
            ledger = ledger._parent
        return False

    def pods_on(self, node: str) -> list[Pod]:
        """The pods on ``node``: the snapshot's and those placed on this ledger."""
        root = self
        while root._parent is not None:
            root = root._parent
        info = root._infos.get(node)
        there = [p for p in info.pods if not self._evicted(p.ref.uid)] if info is not None else []
        return there + [pod for pod, name in self.placed() if name == node]

    def _nodes_root(self) -> Mapping[str, Node]:
        ledger = self
        while ledger._parent is not None:
            ledger = ledger._parent
        return ledger._nodes

    # -- the books -----------------------------------------------------------------------------

    def refusal(self, pod: Pod, node: str) -> str:
        """Why a book turns ``pod`` away from ``node`` now (its volumes, its claims'
        devices), the first reason of the first that does; "" if none does."""
        for book in self._books:
            if book.asks(pod):
                reasons = self._reasons(book, pod, node)
                if reasons:
                    return reasons[0]
        return ""

    def _reasons(self, book: Book, pod: Pod, node: str) -> tuple[str, ...]:
        target = self._nodes_root().get(node)
        if target is None:
            return ("node not found",)
        if book is self.volumes:
            # NodeVolumeLimits comes before VolumeBinding in kube-scheduler's filters.
            over = self.volumes.world.limit_reason(pod, target, self.pods_on(node))
            if over:
                return (over,)
        return book.reasons(pod, target)

    def volume_reasons(self, pod: Pod, node: str) -> tuple[str, ...]:
        """Why ``pod``'s volumes cannot be had on ``node`` now, in kube-scheduler's words (a
        claim another pod uses exclusively, attach limits, binding); () if they can (or if
        it asks none)."""
        for book in (self.exclusive, self.volumes):
            if book is not None and book.asks(pod):
                reasons = self._reasons(book, pod, node)
                if reasons:
                    return reasons
        return ()

    def device_reason(self, pod: Pod, node: str) -> str:
        """Why ``pod``'s claims cannot be allocated on ``node`` now; "" if they can (or if
        this ledger knows no devices: a what-if of room only, as a head's target)."""
        if self.claims is None or not self.claims.asks(pod):
            return ""
        reasons = self._reasons(self.claims, pod, node)
        return reasons[0] if reasons else ""

    def asks_volumes(self, pod: Pod) -> bool:
        """Whether placing ``pod`` binds, provisions or takes exclusive use of volumes."""
        return (self.volumes is not None and self.volumes.asks(pod)) or (
            self.exclusive is not None and self.exclusive.asks(pod)
        )

    def admits(self, pod: Pod, node: str) -> bool:
        """Room for the pod's requests on the node, and every book's leave."""
        return self.fits(node, self.requests_on(pod, node)) and not self.refusal(pod, node)

    def place(self, pod: Pod, node: str, *, strict: bool = True) -> None:
        """Take the pod's requests on the node, record it in every book it asks anything
        of, and remember it is there. ``strict``: every book must take it (else
        PlacementConflict, and the turn's Statement is discarded whole: a pod is never
        bound without its devices or volumes); a hold keeps the room even where a book
        cannot take it, and is bound only with a plan (``closing.close``)."""
        self.take(node, self.requests_on(pod, node))
        self._placed.append((pod, node))
        self._anti += bool(pod.pod_anti_affinity)
        for book in self._books:
            if not book.asks(pod):
                continue
            target = self._nodes_root().get(node)
            why = "node not found" if target is None else book.place(pod, target)
            if why and strict:
                self.unplace(pod, node)  # nothing of it stays: the ledger is as it was
                raise PlacementConflict(f"{pod.ref} was placed on {node}, but {why}")

    def unplace(self, pod: Pod, node: str) -> None:
        """Undo a ``place`` of this ledger (the last one of the pod there)."""
        for book in reversed(self._books):
            book.unplace(pod, node)
        self.give(node, self.requests_on(pod, node))
        for i in range(len(self._placed) - 1, -1, -1):
            if self._placed[i][0] is pod and self._placed[i][1] == node:
                del self._placed[i]
                self._anti -= bool(pod.pod_anti_affinity)
                break

    def set_aside(self, pod: Pod, node: str) -> None:
        """Room and choices held by the ledgers below for ``pod`` on ``node`` are free on
        this one: a preemptor's own held room, its to use again in a what-if."""
        self.give(node, pod.requests)
        for book in self._books:
            book.set_aside(pod, node)

    # -- devices: what gangs and what-ifs ask of the claims' book ---------------------------

    def plan(self, pod: Pod, node: str) -> ClaimPlan | str:
        """What placing ``pod`` on ``node`` does to its claims, or why its devices cannot be
        had there."""
        target = self._nodes_root().get(node)
        if self.claims is None or target is None:
            return "devices are not known to this pass" if self.claims is None else "node not found"
        return self.claims.plan(pod, target)

    def plan_of(self, ref: PodRef, node: str) -> ClaimPlan | None:
        return self.claims.plan_of(ref, node) if self.claims is not None else None

    def volume_plan_of(self, ref: PodRef, node: str) -> VolumePlan | None:
        return self.volumes.plan_of(ref, node) if self.volumes is not None else None

    def device_shape(self, pod: Pod) -> tuple | None:
        """``DeviceWorld.shape`` as of this ledger."""
        if self.claims is None:
            return None
        return self.claims.world.shape(pod, allocated=self.claims.allocated)

    def allocated(self, key: tuple[str, str]) -> Allocation | None:
        """The allocation this pass made for a claim, if it made one."""
        return self.claims.allocated(key) if self.claims is not None else None

    def taken(self, device: DeviceId) -> bool:
        """Whether a placement of this pass took the device."""
        return self.claims is not None and self.claims.taken(device)

    def freed(self, device: DeviceId) -> bool:
        """Whether a what-if gave back the device (its claim's pods evicted)."""
        return self.claims is not None and self.claims.freed(device)

    def free_devices(self, devices: Iterable[DeviceId]) -> None:
        """A what-if's victims' devices, usable on this ledger. Never on a ledger whose
        placements are bound: until the ResourceClaim controller deallocates the victims'
        claims, the devices are theirs (a claim written with one would put a device in two
        claims)."""
        if self.claims is not None:
            self.claims.free(devices)

    def preallocate(self, key: tuple[str, str], allocation: Allocation) -> None:
        """A claim allocated before the pods that share it are placed."""
        if self.claims is None:
            raise PlacementConflict(f"claim {key} allocated on a ledger that knows no devices")
        self.claims.preallocate(key, allocation)

    def unallocate(self, key: tuple[str, str]) -> None:
        """Undo ``preallocate``."""
        if self.claims is not None:
            self.claims.unallocate(key)

    # -- transactions --------------------------------------------------------------------------

    def placed_anti_affinity(self) -> bool:
        """Whether a pod placed here (or on the ledgers below) carries anti-affinity."""
        return self._anti > 0 or (self._parent is not None and self._parent.placed_anti_affinity())

    def placed(self) -> list[tuple[Pod, str]]:
        """Every pod placed on this ledger and the ledgers it is a scratch of."""
        if self._parent is None:
            return list(self._placed)
        return [*self._parent.placed(), *self._placed]

    def scratch(self) -> Ledger:
        return Ledger({}, parent=self)

    def commit(self) -> None:
        if self._parent is None:
            raise ValueError("only a scratch ledger can be committed")
        for node, room in self._free.items():
            self._parent._free[node] = room
        self._parent._placed.extend(self._placed)
        self._parent._anti += self._anti
        self._parent._gone |= self._gone
        for book in self._books:
            book.commit()
        self._free = {}
        self._placed = []
        self._anti = 0
        self._gone = set()


@dataclass(frozen=True, slots=True)
class Cursors:
    """A mark of the node finder's cursors, in the fence they belong to."""

    context: int
    moves: int  # the finder's count of changes when it was taken
    cursors: Mapping[tuple, int]


@dataclass(frozen=True, slots=True)
class Signature:
    """What the static filters look at: pods that share it fit the same nodes."""

    node_selector: tuple[tuple[str, str], ...]
    affinity: tuple
    tolerations: tuple
    volumes: VolumeTerms = ()

    @classmethod
    def of(cls, pod: Pod, volumes: VolumeTerms = ()) -> Signature:
        return cls(tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations, volumes)


class NodeFinder:
    """Finds a node for a pod on a ledger; built once per pass.

    Static filtering is done once per pod signature. Within a pass free capacity only
    shrinks, so each (signature, requests) class keeps a cursor past the nodes it no longer
    fits; a discarded Statement puts them back where they stood (``mark``/``restore``).
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        ledger: Ledger,
        *,
        infos: Mapping[str, NodeInfo] | None = None,
        neighbours: Neighbours | None = None,
        volumes: Callable[[Pod], VolumeTerms] = lambda pod: (),
        scoring: str = "pack",
    ) -> None:
        self._nodes = nodes
        self._infos = infos or {}
        self._volumes = volumes
        self._scoring = scoring
        self._neighbours = neighbours or Neighbours(nodes, infos or {})

        def fullness(name: str) -> float:
            if infos is not None:
                info = infos.get(name)
                return info.fullness if info is not None else 0.0
            allocatable = nodes[name].allocatable
            room = ledger.free(name)
            used = [1 - room.get(r, 0) / a for r, a in allocatable.items() if a > 0]
            return sum(used) / len(used) if used else 0.0

        # Fullest first (packing), as of the snapshot when node infos are given.
        self._fullness = {name: round(fullness(name), 6) for name in nodes}
        self._order = sorted(nodes, key=lambda n: (-self._fullness[n], n))
        # Emptiest first, for pods that ask to be spread (least allocated): sorted when a
        # pod first asks, as most passes have none.
        self._spread_order: list[str] | None = None
        self._spread_fit: dict[Signature, list[str]] = {}
        self._static: dict[Signature, tuple[list[str], dict[str, int]]] = {}
        self._static_sets: dict[Signature, frozenset[str]] = {}
        self._cursors: dict[tuple[Signature, Resources, str], int] = {}
        # The nodes a gang is kept inside while it is placed (``fenced``): one domain of its
        # networkTopology's tier; what was found for each signature inside it.
        self._fence: frozenset[str] | None = None
        # Which cursors are in use: 0 outside any fence, else the fence's serial number
        # (a mark taken in one is no use in another: they index different lists).
        self._context = 0
        self._serial = 0
        self._moves = 0  # advanced whenever the cursors change: two marks alike are one
        # Whether a mark holds the cursors dict in use: it is copied before its next change
        # (copy on write: a mark costs nothing while the cursors do not move).
        self._shared = False
        self._fenced: dict[tuple[Signature, str], list[str]] = {}

    @contextmanager
    def fenced(self, nodes: frozenset[str]) -> Iterator[None]:
        """Find nodes among ``nodes`` only, until the block ends. The cursors start afresh
        inside (they index the fenced lists) and stand where they stood before it after it:
        a cursor only ever passes nodes without room, so an earlier one is never wrong."""
        if self._fence is not None:
            raise RuntimeError("the node finder is fenced already")
        saved, self._cursors = (self._cursors, self._shared), {}
        self._shared = False
        self._fence, self._fenced = nodes.intersection(self._nodes), {}
        self._serial += 1
        self._context = self._serial
        self._moves += 1
        try:
            yield
        finally:
            self._fence, self._fenced = None, {}
            self._cursors, self._shared = saved
            self._context = 0
            self._moves += 1

    def _candidates(self, signature: Signature, pod: Pod) -> tuple[list[str], dict[str, int]]:
        cached = self._static.get(signature)
        if cached is None:
            fit: list[str] = []
            rejected: dict[str, int] = {}
            volumes = signature.volumes
            for name in self._order:
                node = self._nodes[name]
                reason = static_reason(pod, node) or (
                    volume_reason(volumes, node) if volumes else ""
                )
                if reason:
                    rejected[reason] = rejected.get(reason, 0) + 1
                else:
                    fit.append(name)
            cached = self._static[signature] = (fit, rejected)
        return cached

    def static_fit(self, pod: Pod) -> frozenset[str]:
        """The nodes ``pod`` may go on at all (selectors, affinity, taints, readiness); the same
        set object for every pod of a signature."""
        signature = self.signature(pod)
        fit = self._static_sets.get(signature)
        if fit is None:
            fit = self._static_sets[signature] = frozenset(self._candidates(signature, pod)[0])
        return fit if self._fence is None else fit & self._fence

    def inert(self, pod: Pod, ledger: Ledger) -> bool:
        """Whether no other pod can turn a node away from ``pod`` (room aside)."""
        return self._neighbours.inert(pod, placed_anti_affinity=ledger.placed_anti_affinity())

    def check(self, pod: Pod, ledger: Ledger) -> Check | None:
        """The filter on the other pods for ``pod`` on ``ledger``; None where none applies."""
        if self.inert(pod, ledger):
            return None
        return self._neighbours.check(pod, ledger.placed())

    def signature(self, pod: Pod) -> Signature:
        return Signature.of(pod, self._volumes(pod) if pod.claims else ())

    def _ordered_fit(self, signature: Signature, pod: Pod, strategy: str) -> list[str]:
        fit, _ = self._candidates(signature, pod)
        if strategy == "spread":
            spread = self._spread_fit.get(signature)
            if spread is None:
                allowed = set(fit)
                if self._spread_order is None:
                    self._spread_order = sorted(self._nodes, key=lambda n: (self._fullness[n], n))
                spread = [n for n in self._spread_order if n in allowed]
                self._spread_fit[signature] = spread
            fit = spread
        fence = self._fence
        if fence is None:
            return fit
        inside = self._fenced.get((signature, strategy))
        if inside is None:
            inside = self._fenced[(signature, strategy)] = [n for n in fit if n in fence]
        return inside

    def candidates(self, pod: Pod) -> list[str]:
        """The nodes ``pod`` may go on at all, in packing order."""
        return self._ordered_fit(self.signature(pod), pod, "pack")

    def find(self, pod: Pod, ledger: Ledger) -> str | None:
        signature = self.signature(pod)
        strategy = pod.scoring or self._scoring
        fit = self._ordered_fit(signature, pod, strategy)
        # Pods whose claims ask alike find devices on the same nodes: the cursor moves past
        # those without (devices, like room, are only taken in a pass).
        asks_devices = ledger.asks_devices(pod)
        devices = ledger.device_shape(pod) if asks_devices else None
        cursor_key = (signature, pod.requests, strategy, devices)
        requests = pod.requests
        start = self._cursors.get(cursor_key, 0)
        check = self.check(pod, ledger)
        if pod.prefers or strategy == "spread":
            # Every node that takes it now, scored: preferences weighed, or the emptiest.
            cursors = self._writable()
            candidates, cursors[cursor_key] = self._all_that_fit(
                pod, fit, ledger, check, start=start
            )
            if pod.prefers:
                return self._best(pod, candidates, ledger)
            return self._emptiest(pod, candidates, ledger)
        volumes = ledger.asks_volumes(pod)
        if check is None and not volumes and (not asks_devices or devices is not None):
            for i in range(start, len(fit)):
                if ledger.fits(fit[i], requests) and (
                    devices is None or not ledger.device_reason(pod, fit[i])
                ):
                    self._writable()[cursor_key] = i
                    return fit[i]
            self._writable()[cursor_key] = len(fit)
            return None
        # The cursor moves only past nodes without room (room only shrinks in a pass); a
        # node turned away by the other pods, or without the volumes or devices this pod's
        # claims ask (claims differ from pod to pod), may take the next pod of the same
        # shape.
        roomy: int | None = None
        found: str | None = None
        for i in range(start, len(fit)):
            if not ledger.fits(
                fit[i], ledger.requests_on(pod, fit[i]) if pod.extended else requests
            ):
                continue
            if roomy is None:
                roomy = i
            if (check is None or not check.reason(fit[i])) and not ledger.refusal(pod, fit[i]):
                found = fit[i]
                break
        self._writable()[cursor_key] = roomy if roomy is not None else len(fit)
        return found

    def _all_that_fit(
        self, pod: Pod, fit: list[str], ledger: Ledger, check: Check | None, *, start: int
    ) -> tuple[list[str], int]:
        """Every node of ``fit`` from ``start`` that takes ``pod`` now (room, the other pods,
        devices), and where the cursor goes: to the first with room (room only shrinks in a
        pass; a node turned away by the other pods may take the next pod of the shape)."""
        roomy: int | None = None
        candidates = []
        for i in range(start, len(fit)):
            if not ledger.fits(fit[i], ledger.requests_on(pod, fit[i])):
                continue
            if roomy is None:
                roomy = i
            if (check is None or not check.reason(fit[i])) and not ledger.refusal(pod, fit[i]):
                candidates.append(fit[i])
        return candidates, roomy if roomy is not None else len(fit)

    def _emptiest(self, pod: Pod, candidates: list[str], ledger: Ledger) -> str | None:
        """Spread (kube-scheduler's LeastAllocated): the node with room that is emptiest
        now, what this pass placed counted; ties in the snapshot's spread order. The static
        order alone would put every member placed in one pass on the same node (four
        single-GPU gangs on one of four empty nodes). O(nodes) a pod."""
        return min(
            candidates,
            key=lambda name: fullness(self._nodes[name], ledger.free(name), pod),
            default=None,
        )

    def _best(self, pod: Pod, candidates: list[str], ledger: Ledger) -> str | None:
        """The nodes that take it, scored (``scoring.best_node``): for pods with preferences."""
        if not candidates:
            return None
        placed = ledger.placed()
        return best_node(
            pod,
            candidates,
            nodes=self._nodes,
            free={n: ledger.free(n) for n in candidates},
            others=pods_on(self._infos, placed),
            namespace_labels=self._neighbours.namespace_labels,
            strategy=pod.scoring or self._scoring,
        )

    def mark(self) -> Cursors:
        """Where the cursors stand; ``restore`` puts them back there. A Statement undone to
        a mark leaves the ledger exactly as it was then, so its cursors are right again: a
        gang that fails costs one scan of the nodes, not a scan from the start for each
        next one."""
        self._shared = True
        return Cursors(self._context, self._moves, self._cursors)

    def restore(self, mark: Cursors | None = None) -> None:
        """Put the cursors back to ``mark``, or to the start (None, or a mark of another
        fence, whose cursors index other lists: starting over is never wrong)."""
        same = mark is not None and mark.context == self._context
        self._cursors = mark.cursors if same else {}  # type: ignore[union-attr,assignment]
        self._shared = same
        self._moves += 1

    def _writable(self) -> dict[tuple[Signature, Resources, str], int]:
        """The cursors, to be changed now: copied first if a mark holds them."""
        if self._shared:
            self._cursors = dict(self._cursors)
            self._shared = False
        self._moves += 1
        return self._cursors

    @property
    def context(self) -> int:
        """The fence the cursors in use belong to (0: none)."""
        return self._context

    @property
    def moves(self) -> int:
        """How often the cursors changed: a mark taken since is the same as one before."""
        return self._moves

    def explain(self, pod: Pod, ledger: Ledger) -> Status:
        """Why no node fits ``pod`` now, counted per reason as kube-scheduler does."""
        signature = self.signature(pod)
        fit, rejected = self._candidates(signature, pod)
        reasons = dict(rejected)
        total = len(self._nodes)
        binding = VOLUME_NODE_CONFLICT in reasons and ledger.asks_volumes(pod)
        if self._fence is not None or binding:
            # Counted over the fenced nodes alone; and where a bound volume is out of a
            # node's reach, VolumeBinding says at once what the pod's other claims find
            # there too.
            if self._fence is not None:
                fit = self._ordered_fit(signature, pod, "pack")
            among = self._fence if self._fence is not None else self._nodes.keys()
            reasons, total = {}, len(among)
            for name in among - set(fit):
                reason = static_reason(pod, self._nodes[name]) or (
                    volume_reason(signature.volumes, self._nodes[name]) if signature.volumes else ""
                )
                said = (reason,)
                if reason == VOLUME_NODE_CONFLICT and binding:
                    said = ledger.volume_reasons(pod, name) or said
                for each in said:
                    reasons[each] = reasons.get(each, 0) + 1
        check = self.check(pod, ledger)
        for name in fit:
            # kube-scheduler's filter order: NodePorts, NodeResourcesFit, PodTopologySpread,
            # InterPodAffinity.
            if check is not None and check.pod.host_ports:
                taken = check.reason(name) == PORTS_TAKEN
                if taken:
                    reasons[PORTS_TAKEN] = reasons.get(PORTS_TAKEN, 0) + 1
                    continue
            room = ledger.free(name)
            short = ledger.requests_on(pod, name).shortfalls(room)
            for resource in short:
                key = f"Insufficient {resource}"
                reasons[key] = reasons.get(key, 0) + 1
            if not short and (volume_reasons := ledger.volume_reasons(pod, name)):
                # VolumeBinding runs after NodeResourcesFit, before the pod (anti-)affinity
                # and spread filters; each of its reasons counts.
                for reason in volume_reasons:
                    reasons[reason] = reasons.get(reason, 0) + 1
            elif (
                not short
                and check is not None
                and (reason := check.spread_reason(name) or check.affinity_reason(name))
            ):
                reasons[reason] = reasons.get(reason, 0) + 1
            elif not short and (reason := ledger.device_reason(pod, name)):
                # kube-scheduler's DynamicResources filter runs after the others.
                reasons[reason] = reasons.get(reason, 0) + 1
        counted = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
        detail = ", ".join(f"{count} {reason}" for reason, count in counted)
        return Status.unschedulable(f"0/{total} nodes are available: {detail or 'no nodes'}.")
