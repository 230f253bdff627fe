"""Everything one scheduling pass looks at, frozen: the cluster and the scheduler's memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.budgets import DisruptionBudget
from scheduler.model.devices import DeviceClass, ResourceClaim, ResourceSlice
from scheduler.model.forecasts import Forecast
from scheduler.model.gangs import CompositePodGroup, Owner, PodGroup
from scheduler.model.holdings import QueueHoldings
from scheduler.model.nodes import Node, NodeInfo, node_infos
from scheduler.model.owners import OwnerKey, OwnerKind
from scheduler.model.pods import GangKey, Pod, PodRef
from scheduler.model.queues import Queue, QueueUsage
from scheduler.model.resources import Resources
from scheduler.model.topology import SakkaraGroup, Topology
from scheduler.model.volumes import (
    Claim,
    CsiDriver,
    CsiNode,
    StorageCapacity,
    StorageClass,
    Volume,
    VolumeAttachment,
)


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class Parked:
    """The queue's own memory of a gang that failed for want of room (kube-scheduler's
    unschedulable set): tried again only once a node changed since ``generation`` in a way
    that could take one of its members, its own objects changed (``tried_with``: the very
    objects it was tried with), or the flush interval passed."""

    generation: int  # the snapshot's generation when it was parked
    since: float
    tried_with: tuple[object, ...] = ()
    # For the cache, which leaves parked gangs out of a snapshot: the requests of the
    # pending members (a node that changed and now has room for one of them wakes the gang),
    # and the time by which it must be looked at anyway (its flush, or its timeout).
    shapes: frozenset[Resources] = frozenset()
    due_at: float = 0.0
    # With queues: what its queue and each queue above it held when it was parked, nearest
    # first. Room freed in one of them (a pod of the queue gone, on whatever node, a node
    # already deleted included) may let it in where no node change would say so.
    queues: tuple[tuple[str, Resources], ...] = ()


@dataclass(frozen=True, slots=True)
class Staleness:
    """Stale-gang eviction's memory of a gang running below its minimum."""

    since: float  # since when it has run with fewer members than its minimum
    due: float  # when the rest is to be evicted: the cache puts it in the pass due then
    # The members evicted for it (uids) and when: not evicted again while they are still
    # seen alive (the DisruptionTarget patch comes before the delete), unless that lasts.
    evicted: frozenset[str] = frozenset()
    evicted_at: float | None = None


@dataclass(frozen=True, slots=True)
class GangState:
    """What the scheduler remembers of one gang incarnation between passes.

    Lost on restart, by design: what must survive a restart is written to the API server
    and read back from there (bound pods, the timeout mark, the first attempt). It belongs
    to one incarnation: ``podgroup_uid`` and ``members`` (pod uids) say which, so a
    PodGroup or pods deleted and created again under the same names start afresh.
    """

    first_attempt: float | None = None  # the gang's timeout counts from here
    attempts: int = 0
    retry_at: float = 0.0  # backoff: not tried again before this
    timed_out: bool = False
    # When it timed out: pods created later are not marked, and once every pod of the
    # timed-out incarnation has gone they start a new one (a Job recreating them one by one).
    timed_out_at: float | None = None
    # A member of this incarnation is bound and alive (derived each pass, kept for metrics).
    satisfied: bool = False
    # Set when an attempt failed for want of room (the session's parking).
    parked: Parked | None = None
    # NonStrict only: members placed in earlier passes, held (never bound) until the gang fits.
    reservations: Mapping[PodRef, str] = field(default_factory=dict)
    # The last thing said about the gang, so the same Event is not repeated every pass.
    last_message: str = ""
    # The Scheduled condition of the last attempt, (status, reason, message): kept while the
    # gang backs off, so `kubectl describe pg` says why it waits.
    condition: tuple[str, str, str] | None = None
    podgroup_uid: str = ""
    members: frozenset[str] = frozenset()
    # Whether the "fewer than minMember members left" warning was said for this incarnation.
    below_min_said: bool = False
    # Set while it runs below its minimum and a grace applies (the evict-stale action).
    stale: Staleness | None = None
    # Gang preemption: where its members are to go once the pods it evicted (``victims``,
    # uids) have left, and since when; the room is held for it meanwhile, and it evicts
    # nothing more until they are gone or the nomination lapses.
    nominated: Mapping[PodRef, str] = field(default_factory=dict)
    victims: frozenset[str] = frozenset()
    nominated_at: float | None = None
    # A head gang (waited past --starvation-after): where each member is to go, the room
    # held for it there as it frees.
    head_target: Mapping[PodRef, str] = field(default_factory=dict)
    # For the stranded-by-topology gauge: while it waits with nothing bound, the GPUs
    # (level, GPUs) its hard networkTopology (and each subgroup's) needs inside one unit.
    tier_needs: tuple[tuple[str, int], ...] = ()

    @property
    def holds(self) -> set[tuple[PodRef, str]]:
        """The room it holds, member by member: NonStrict reservations, a preemptor's
        nominated room, a head gang's target. Let go, it frees room as a finished pod does."""
        return {
            (ref, node)
            for where in (self.reservations, self.nominated, self.head_target)
            for ref, node in where.items()
        }


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: Mapping[str, Node]
    pods: tuple[Pod, ...]
    podgroups: Mapping[GangKey, PodGroup] = field(default_factory=dict)
    # The upstream CompositePodGroups (v1alpha3), where they are served.
    composites: Mapping[GangKey, CompositePodGroup] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    memory: Mapping[GangKey, GangState] = field(default_factory=dict)
    # From the sakkara.topology ConfigMap; None without one (node labels or flat instead).
    topology: Topology | None = None
    # Why the topology ConfigMap cannot be used; topology-placed gangs wait while it is so.
    topology_errors: tuple[str, ...] = ()
    groups: Mapping[GangKey, SakkaraGroup] = field(default_factory=dict)
    # What holds resources on each node, kept by the cache. When given, ``pods`` needs to hold
    # only our own pods; without it (tests, explain) it is worked out from ``pods``.
    node_infos: Mapping[str, NodeInfo] | None = None
    # Pods assumed bound whose bind is not confirmed yet (uids): they hold their node's room,
    # but do not make their gang satisfied (the group's first bind may still be rejected).
    in_flight: frozenset[str] = frozenset()
    # Pods this scheduler chose to evict or move whose going the cache has not seen yet
    # (uids): they still hold their node's room, but keep no gang running and are no victims
    # again (a pass may come before the watch shows their mark or their deletion).
    leaving: frozenset[str] = frozenset()
    # The cache's generation when the snapshot was taken: a node whose info has a higher
    # generation than a gang's last failure changed since, and may help it.
    generation: int = 0
    # The generation at which devices were last freed (a ResourceClaim's allocation taken
    # off, or the claim gone): a gang parked for want of devices before it may fit now,
    # though no node changed (kube-scheduler's DynamicResources hints on claim changes).
    devices_freed: int = 0
    # Namespace name -> its labels, for the namespaceSelector of pod (anti-)affinity terms.
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Storage: claims by (namespace, name), volumes by name, storage classes by name.
    claims: Mapping[tuple[str, str], Claim] = field(default_factory=dict)
    volumes: Mapping[str, Volume] = field(default_factory=dict)
    storage_classes: Mapping[str, StorageClass] = field(default_factory=dict)
    # Nodes' CSI attach limits by node name, and the volumes attached to nodes.
    csi_nodes: Mapping[str, CsiNode] = field(default_factory=dict)
    volume_attachments: tuple[VolumeAttachment, ...] = ()
    # CSI drivers by name, and the storage capacity those that publish it have left.
    csi_drivers: Mapping[str, CsiDriver] = field(default_factory=dict)
    storage_capacities: tuple[StorageCapacity, ...] = ()
    # PodDisruptionBudgets: which victims preemption prefers (those that break none).
    budgets: tuple[DisruptionBudget, ...] = ()
    # The owners that make gangs of pods that declare none (Jobs, JobSets, …), and the owner
    # kinds the API server serves and lets us list: an owner of a kind not among them is
    # never seen, so its pods are placed as they come rather than wait for it.
    owners: Mapping[OwnerKey, Owner] = field(default_factory=dict)
    owner_kinds: frozenset[OwnerKind] = frozenset(OwnerKind)
    # Volcano's Queues by name; None where the API server does not serve them: then
    # there are no queues, and every gang competes on priority and age alone.
    queues: Mapping[str, Queue] | None = None
    # With queues: what the pending pods of ours ask for, by the queue they name ("" for the
    # default), parked gangs' included (the cache's count); None: worked out from ``pods``.
    queue_waiting: Mapping[str, Resources] | None = None
    # With --fair-share-half-life: the queues' recent usage as the last pass left it.
    queue_usage: QueueUsage | None = None
    # With queues: what their pods hold, summed by the cache node by node as nodes changed;
    # None: walked from the node infos.
    queue_holdings: QueueHoldings | None = None

    # Dynamic resource allocation: the ResourceSlices drivers publish, DeviceClasses
    # by name, ResourceClaims by (namespace, name) (allocations written by binds in flight
    # included), and how CEL selectors are evaluated: a callable (expression, driver,
    # device) -> bool kept by the cache, so compiled selectors outlive a pass; None: the
    # core makes its own.
    resource_slices: tuple[ResourceSlice, ...] = ()
    device_classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    resource_claims: Mapping[tuple[str, str], ResourceClaim] = field(default_factory=dict)
    selectors: Any = field(default=None, compare=False)
    # The latest forward play (``--forecast-interval``): each waiting gang's expected start,
    # written to our PodGroups' status; None while no play has run.
    forecast: Forecast | None = None

    def infos(self) -> Mapping[str, NodeInfo]:
        """Per known node, what holds resources on it."""
        if self.node_infos is not None:
            return self.node_infos
        return node_infos(self.nodes, self.pods)
