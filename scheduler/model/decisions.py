"""What a scheduling pass decided, as data: the shell is what turns it into API calls."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from scheduler.model.devices import Allocation, Consumer, DeviceRequest
from scheduler.model.gangs import PodGroupStatus
from scheduler.model.pods import GangKey, PodGroupApi, PodRef
from scheduler.model.queues import QueueUsage
from scheduler.model.snapshot import GangState
from scheduler.model.status import Status
from scheduler.model.topology import Topology

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about."""

    kind: str  # "Pod" or "PodGroup"
    namespace: str
    name: str
    uid: str = ""
    api_version: str = ""  # a PodGroup's (which kind of PodGroup); "" for the usual one


@dataclass(frozen=True, slots=True)
class Event:
    regarding: ObjectRef
    type: str  # Normal or Warning
    reason: str  # Scheduled, FailedScheduling, GangTimeout, InvalidGangSpec, ...
    message: str


@dataclass(frozen=True, slots=True)
class Binding:
    pod: PodRef
    node: str


@dataclass(frozen=True, slots=True)
class Placement:
    """What is written back once a topology-placed gang is bound, as Sakkara does: rank
    labels on the pods, the placement tree on the PodGroup or the Sakkara group ConfigMap."""

    ranks: tuple[tuple[PodRef, int], ...]
    tree: str  # JSON: {"root": {unit: {... {node: [pod names]}}}}
    retries: int  # placement attempts it took, this one included
    begin: float  # when the gang began waiting: its first member's creation
    group: tuple[str, str] | None = None  # Sakkara group ConfigMap (namespace, name)
    podgroup: GangKey | None = None
    podgroup_api: PodGroupApi = PodGroupApi.OURS
    podgroup_version: str = ""  # its apiVersion as read (the upstream kind's varies)


@dataclass(frozen=True, slots=True)
class GangBinding:
    """The members of one gang to bind in this pass, and what to write back once they are."""

    gang: GangKey
    bindings: tuple[Binding, ...]
    placement: Placement | None = None


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """What binding a group writes to one ResourceClaim before its first bind, as
    kube-scheduler's PreBind does: the allocation its pods rely on (written unless the claim
    shows it already: made by this pass, or by an earlier one whose write is still in
    flight), and the group's pods it is to be reserved for. ``resource_version`` is the one
    the pass saw; a claim allocated otherwise since is a conflict, and the group goes
    again."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    allocation: Allocation | None
    pods: tuple[PodRef, ...]
    # A claim to make first, for the extended resources of ``pods[0]`` that devices serve:
    # its requests, and the pod's ``status.extendedResourceClaimStatus`` mappings
    # (container, resource, request) to write once it is allocated. ``name`` is then a
    # placeholder: the API server names the claim.
    requests: tuple[DeviceRequest, ...] = ()
    mappings: tuple[tuple[str, str, str], ...] = ()
    # The upstream PodGroups that share the claim among ``pods``: reserved for each group,
    # not for its members (``grouped``: the uids of the pods a group covers).
    groups: tuple[Consumer, ...] = ()
    grouped: frozenset[str] = frozenset()

    @property
    def made_here(self) -> bool:
        return bool(self.mappings)


@dataclass(frozen=True, slots=True)
class VolumeWrite:
    """What binding a group writes for one of its pods' claims before any bind, as
    kube-scheduler's PreBind does: the existing volume chosen for it (the volume's claimRef
    names the claim), or the node its volume is to be made on (the claim's selected-node
    annotation, for its provisioner). The pods are bound once every claim is bound."""

    namespace: str
    name: str  # the claim's
    uid: str
    pod: PodRef  # the pod it is bound for
    volume: str = ""
    node: str = ""  # set when the volume is to be made there
    # The volume's, as the pass saw it: its claimRef is written only if no one changed it.
    resource_version: str = ""
    # The volume's claimRef named the claim already (its provisioner made it for the claim,
    # or a user bound them): nothing is written, and nothing taken back, since the volume
    # is the claim's whatever becomes of this group.
    prebound: bool = False

    @property
    def provisions(self) -> bool:
        return bool(self.node)


@dataclass(frozen=True, slots=True)
class VolumeRelease:
    """A claim's selected-node to take off: this scheduler asked for its volume on ``node``
    longer ago than any group waits, and nothing will use it (``volume_leftovers``). Written
    only if the claim is still as the pass saw it."""

    namespace: str
    name: str
    uid: str
    node: str
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class GroupBinding:
    """One commit point: the gangs of one GangGroup bound in this pass.

    ``all_or_nothing`` is true while the group's gangs are not yet satisfied: the shell then
    binds one member of the whole group first, and only if that succeeds the rest, so a
    group whose first bind fails leaves nothing bound and is tried again whole. Gangs that
    are already satisfied (their incarnation has a live bound member) get
    ``all_or_nothing=False``: their members are placed one by one (after gang).
    """

    gangs: tuple[GangBinding, ...]
    all_or_nothing: bool = True
    claims: tuple[ClaimWrite, ...] = ()  # dynamic resource allocation
    volumes: tuple[VolumeWrite, ...] = ()  # claims waiting for their first consumer

    @property
    def bindings(self) -> tuple[Binding, ...]:
        return tuple(b for g in self.gangs for b in g.bindings)

    @property
    def keys(self) -> tuple[GangKey, ...]:
        return tuple(g.gang for g in self.gangs)


@dataclass(frozen=True, slots=True)
class PodPatch:
    """Annotations to set on a pod (the timeout mark); None removes one (merge patch)."""

    pod: PodRef
    annotations: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class PodCondition:
    """The PodScheduled condition to write on a pod that could not be placed, as
    kube-scheduler writes it: the cluster autoscaler and Karpenter add nodes for exactly
    the pods that carry ``PodScheduled=False`` with reason ``Unschedulable``."""

    pod: PodRef
    status: str
    reason: str
    message: str
    last_transition: str  # RFC 3339: kept while the status stays the same


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """A GangGroup's victims, and the fewest any choice could have made room with as far
    as the search knows (equal to ``victims`` once proven the fewest)."""

    action: str  # preempt, reclaim
    gangs: tuple[GangKey, ...]
    victims: int
    fewest_possible: int

    @property
    def above_fewest(self) -> int:
        return self.victims - self.fewest_possible


# The DisruptionTarget reasons a scheduler's evictions write: a preemption's (and reclaim's)
# victims, as kube-scheduler's, and a stale gang's members.
PREEMPTED_BY_SCHEDULER = "PreemptionByScheduler"
STALE_GANG = "StaleGang"


@dataclass(frozen=True, slots=True)
class Eviction:
    """A pod to delete so that a gang of higher priority fits (gang preemption): marked
    with a ``DisruptionTarget`` condition first, and told in a ``Preempted`` Event; or to
    evict so that it starts again elsewhere (consolidation: ``moved_to``)."""

    pod: PodRef
    node: str
    message: str
    priority: int = 0  # the victim's
    # Reclaim's: the victim's queue, which gives room back to a queue below its share;
    # "" for preemption by priority.
    reclaimed_from: str = ""
    # A member of a stale gang: evicted because its gang runs below its minimum, not
    # for a preemptor (its Event and its DisruptionTarget condition say StaleGang).
    stale: bool = False
    # Its gang is evicted whole (a victim gang, or a stale one): said in the mark, so that
    # a pass may finish a whole gang a stopped sender left half-marked, and only such.
    whole_gang: bool = False
    # Consolidation's: the node the pod was found to fit on instead. It goes through the
    # Eviction API, so that PodDisruptionBudgets hold, and its controller makes it again.
    moved_to: str = ""


@dataclass(frozen=True, slots=True)
class Nomination:
    """``status.nominatedNodeName`` for a preemptor's pod: where it will go."""

    pod: PodRef
    node: str  # "" clears it


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    gang: GangKey
    status: PodGroupStatus
    api: PodGroupApi = PodGroupApi.OURS  # the kind of PodGroup: where and how it is written
    # The upstream kind's version, as it was read (the one served): where it is written.
    api_version: str = ""


class Verdict(Enum):
    """What came of a GangGroup's turn in an action, as the actions after it read it."""

    SCHEDULED = "scheduled"  # placed whole: its binds are one commit point
    UNSCHEDULABLE = "unschedulable"  # tried, and it did not fit: preemption may act for it
    BACKING_OFF = "backing-off"  # not tried: the backoff of its last failed attempt runs
    PARKED = "parked"  # not tried: nothing changed since its last failure that could help it
    NOT_READY = "not-ready"  # not tried: invalid, or something it names or needs is missing
    AWAITING_VICTIMS = "awaiting-victims"  # not tried: the pods it preempted are leaving
    TIMED_OUT = "timed-out"  # not tried, ever again: it was not placed in time
    RUNNING = "running"  # satisfied already: its pending members placed one by one

    @property
    def tried(self) -> bool:
        """Whether a placement was attempted (what the attempts metric counts)."""
        return self in (Verdict.SCHEDULED, Verdict.UNSCHEDULABLE)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One GangGroup's turn in one action: which gangs, what came of it, and why."""

    action: str
    gangs: tuple[GangKey, ...]
    verdict: Verdict
    status: Status = field(default_factory=Status.success)


@dataclass(frozen=True, slots=True)
class ActionError:
    """An action raised in a GangGroup's turn: that turn was undone, the pass went on. The
    shell logs it (with ``detail``, the traceback) and counts it."""

    action: str
    gangs: tuple[GangKey, ...]
    error: str  # the exception, as "TypeError: ..."
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Result:
    bindings: tuple[GroupBinding, ...] = ()
    pod_patches: tuple[PodPatch, ...] = ()
    pod_conditions: tuple[PodCondition, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    nominations: tuple[Nomination, ...] = ()
    status_updates: tuple[StatusUpdate, ...] = ()
    events: tuple[Event, ...] = ()
    memory: Mapping[GangKey, GangState] = field(default_factory=dict)
    # The earliest time a backoff or timeout falls due; the loop wakes then if nothing else
    # woke it first.
    wake_at: float | None = None
    # Every GangGroup tried in this pass and how it went (``Verdict.tried``).
    attempts: tuple[Attempt, ...] = ()
    # Turns that raised: each undone alone, the rest of the pass kept.
    errors: tuple[ActionError, ...] = ()
    # Each GangGroup that evicted, and how near its victims are to the fewest possible.
    victim_choices: tuple[VictimChoice, ...] = ()
    # Said once per change by the shell's log: cluster nodes the topology does not name.
    topology_notes: tuple[str, ...] = ()
    # With --fair-share-half-life: the queues' recent usage, for the next pass.
    queue_usage: QueueUsage | None = None
    # ResourceClaims made for the extended resources of pods still pending, by attempts
    # that did not bind: deleted before the pods are tried again, as kube-scheduler does.
    stale_claims: tuple[tuple[str, str], ...] = ()
    # Claims whose volume this scheduler asked for on a node, long ago, that nothing will
    # use there: their selected-node is taken off, so their pods may go elsewhere.
    volume_releases: tuple[VolumeRelease, ...] = ()
    # The tree the pass placed on, for the stranded-by-topology gauge; None when no
    # gang of the pass states a tier (the tree is then not built).
    topology: Topology | None = None
    # Gangs with members still to place, neither satisfied nor timed out, after this
    # pass (the parked ones the snapshot left out included): a gang whose pods all
    # finished has none to place, however long its pods stay.
    pending_gangs: int = 0
