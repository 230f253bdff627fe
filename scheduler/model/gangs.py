"""PodGroups as declared, and gangs as resolved from PodGroups and pod annotations."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from scheduler.model import names
from scheduler.model.owners import Grouping, OwnerKey
from scheduler.model.pods import (
    SUCCEEDED,
    GangKey,
    GangOptions,
    Mode,
    NetworkTopology,
    Pod,
    PodClaim,
    PodGroupApi,
    PodRef,
    SubGroupPolicy,
)
from scheduler.model.resources import Resources
from scheduler.model.topology import Constraints, SakkaraGroup

# metav1.Condition's message limit, in bytes (the API server refuses a longer one).
CONDITION_MESSAGE_BYTES = 32768


def clip_message(message: str, limit: int = CONDITION_MESSAGE_BYTES) -> str:
    """``message`` cut to ``limit`` bytes of UTF-8, never inside a character."""
    raw = message.encode()
    return message if len(raw) <= limit else raw[:limit].decode(errors="ignore")


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True", "False" or "Unknown"
    reason: str = ""
    message: str = ""
    last_transition: str = ""  # RFC 3339, kept from the previous status when unchanged
    # metav1.Condition's (the upstream PodGroup's conditions): the generation it was set for.
    observed_generation: int = 0


@dataclass(frozen=True, slots=True)
class PodGroupStatus:
    phase: str = ""
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    schedule_start_time: str = ""  # RFC 3339
    occupied_by: str = ""
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class SubGroup:
    """One subgroup of a gang: the members one policy's labels put together, placed
    whole (``size`` of them at least) or not at all. ``name`` is Volcano's subjob name: the
    policy's, then the label values; ``index`` orders subgroups of a policy (the first value
    as a number, as Volcano's MatchIndex; 0 when it is none)."""

    policy: str
    name: str
    size: int
    members: tuple[PodRef, ...]
    index: int = 0
    topology: NetworkTopology | None = None


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A PodGroup object of any of the kinds in ``PodGroupApi``, in one shape; annotation
    overrides are folded in by the codec. ``basic``: an upstream PodGroup whose policy is
    ``basic`` (no gang: its pods are placed one by one, ``min_member`` 1)."""

    key: GangKey
    uid: str = ""
    min_member: int = 1
    min_resources: Resources | None = None
    timeout_seconds: float | None = None
    starvation_seconds: float | None = None  # gang-scheduler.io/starvation-after
    expected_seconds: float | None = None  # gang-scheduler.io/expected-duration
    stale_seconds: float | None = None  # gang-scheduler.io/stale-after
    created: float = 0.0
    mode: Mode | None = None
    total_number: int | None = None
    groups: tuple[GangKey, ...] | None = None
    constraints: Constraints | None = None
    status: PodGroupStatus = field(default_factory=PodGroupStatus)
    errors: tuple[str, ...] = ()
    api: PodGroupApi = PodGroupApi.OURS
    generation: int = 0  # metadata.generation: upstream conditions carry it
    basic: bool = False
    # The batch Job whose controller made it (its controller ownerReference; "" for none):
    # 1.37's Job controller (WorkloadWithJob) gives every Job such a PodGroup, basic unless
    # the Job's spec.scheduling asks for a gang.
    made_by_job: str = ""
    # spec.priorityClassName (Volcano's; the upstream one's), and the upstream spec.priority
    # that admission resolves it to: the gang's priority, over its pods'.
    priority_class: str = ""
    priority: int | None = None
    # The queue it names: Volcano's spec.queue, else our label or Volcano's annotation.
    queue: str = ""
    # Volcano's spec.subGroupPolicy: gangs inside the gang.
    subgroup_policy: tuple[SubGroupPolicy, ...] = ()
    # Volcano's spec.networkTopology: the whole gang inside one domain of a tier.
    network_topology: NetworkTopology | None = None
    # The upstream kind's: the version it was read at (the served one), and its
    # spec.disruptionMode, "single" (its members may go one at a time) or "all".
    api_version: str = ""
    disruption_mode: str = ""
    # The upstream kind's spec.parentCompositePodGroupName: the CompositePodGroup it is a
    # child of ("" for none).
    parent: str = ""
    # The upstream kind's spec.resourceClaims: claims its members share, reserved for the
    # group (``claim`` the ResourceClaim named, or ``template`` the one made from).
    claims: tuple[PodClaim, ...] = ()
    # The upstream kind's spec.preemptionPolicy (1.37's PodGroupPreemptionPolicy): False for
    # Never, a group that waits for room rather than take it.
    preempts: bool = True

    def shares(self, entry: PodClaim) -> bool:
        """Whether a member's claim entry is one of the group's claims."""
        return any(own.same_entry(entry) for own in self.claims)

    @property
    def served_as(self) -> str:
        """The apiVersion it is written at: the version it was read at, for the upstream
        kind (served at different versions by different releases)."""
        if self.api is PodGroupApi.WORKLOAD and self.api_version:
            return self.api_version
        return self.api.value

    @property
    def scheduled_condition(self) -> str:
        """The condition kube-scheduler writes on an upstream PodGroup of this version."""
        if self.api_version in ("", names.WORKLOAD_V1ALPHA2):
            return names.UPSTREAM_SCHEDULED
        return names.UPSTREAM_INITIALLY_SCHEDULED


@dataclass(frozen=True, slots=True)
class CompositePodGroup:
    """A CompositePodGroup (``scheduling.k8s.io/v1alpha3``, Kubernetes 1.37): a group of
    PodGroups and CompositePodGroups (its children name it as their parent) that is placed
    once ``min_groups`` of its children are (``gang.minGroupCount``; 1 for ``basic``)."""

    key: GangKey
    uid: str = ""
    parent: str = ""  # spec.parentCompositePodGroupName
    min_groups: int = 1
    basic: bool = False
    # spec.disruptionMode: "all" evicts every pod under it as one victim; "single" (the
    # default) leaves it to its children.
    disruption_mode: str = "single"
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Quorum:
    """How many of its parts a hierarchy of CompositePodGroups needs placed: ``minimum`` of
    ``parts``, each a gang (by key) or a Quorum of its own (a nested CompositePodGroup). A
    gang is placed when its own minimum is; kube-scheduler counts the same way, from the
    root down."""

    name: str  # the CompositePodGroup's, for messages
    minimum: int
    parts: tuple[GangKey | Quorum, ...]

    def met(self, placed: Collection[GangKey]) -> bool:
        """Whether the gangs ``placed`` are enough, at every level."""
        return (
            sum(1 for p in self.parts if (p.met(placed) if isinstance(p, Quorum) else p in placed))
            >= self.minimum
        )

    def gangs(self) -> tuple[GangKey, ...]:
        """Every gang under it, sorted."""
        found: list[GangKey] = []
        for part in self.parts:
            found.extend(part.gangs() if isinstance(part, Quorum) else (part,))
        return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class Gang:
    """A gang resolved from everything that declares it, with all of its known members.

    ``members`` holds our pods of the gang in any state; ``group`` lists every gang of its
    GangGroup, itself included, sorted. ``total`` is how many members the gang declares it
    will have (Koordinator's total-number, else ``min_member``): it is not tried before that
    many exist, so the first attempt sees the whole gang and its priorities. ``errors`` make
    the gang invalid: it is not tried and its members get an InvalidGangSpec event naming
    the problem.
    """

    key: GangKey
    min_member: int
    total: int
    mode: Mode
    timeout_seconds: float
    created: float
    group: tuple[GangKey, ...]
    members: tuple[Pod, ...]
    podgroup: PodGroup | None = None
    min_resources: Resources | None = None
    errors: tuple[str, ...] = ()
    # Placed by the topology solver when set (Sakkara groups always: pack by default).
    constraints: Constraints | None = None
    # How long it may run below its minimum before the rest is evicted; None:
    # --stale-gang-after; inf: never.
    stale_seconds: float | None = None
    # How long it may wait before it is the head gang; None: --starvation-after.
    starvation_seconds: float | None = None
    # How long it is expected to run once bound, as stated; None: not stated.
    expected_seconds: float | None = None
    sakkara: SakkaraGroup | None = None
    priority: int | None = None  # a Sakkara group's own priority, over its pods'
    # How the gang was formed, when its owner formed it ("gang from JobSet ml/llama: …").
    origin: str = ""
    # The queue it is in: what its PodGroup or its members name; "" for the default.
    queue: str = ""
    # Gangs inside the gang: each placed whole or not at all, and per policy the number
    # of them the gang needs (its minSubGroups).
    subgroups: tuple[SubGroup, ...] = ()
    subgroup_minimums: tuple[tuple[str, int], ...] = ()
    # Kept inside one unit of a tier: a Volcano PodGroup's spec.networkTopology, or
    # gang-scheduler.io/network-topology on the pods, their PodGroup or their owner.
    network_topology: NetworkTopology | None = None
    # For a gang of one Job's pods (declared for them, or made by the Job or its JobSet):
    # that Job's own count of its progress; None for any other gang, or while the Job is
    # not seen (then the members that Succeeded are counted as pods).
    job_progress: JobProgress | None = None
    # A gang of a CompositePodGroup hierarchy: what its GangGroup (``group``, every gang of
    # the hierarchy) needs placed together; None for a GangGroup that needs every gang.
    quorum: Quorum | None = None

    @property
    def topology_placed(self) -> bool:
        return self.constraints is not None or self.sakkara is not None

    @property
    def completed(self) -> int:
        """Members that ran to completion (Succeeded) and count toward the minimum (as
        Volcano's ReadyTaskNum does, by its source): a Job's member that finished did its
        part and the Job makes no other in its place, so a gang cut short whose bound members
        finished before the rest could bind would otherwise wait forever.
        They fill only the places of the gang's ``total`` that no live member takes: pods made
        anew for all of a gang that ran before are a whole new gang, and an owner that
        already shrank the gang by its completions (a Job near its end) is not counted
        twice.

        For a gang of one Job's pods the Job's status says it better (``job_progress``): the
        pods that Succeeded, those deleted since too (their node gone, say), fill
        the places of the total beyond the completions the Job has left, pods it has not
        made yet included. Counted by the pods alone, a new round of a Job whose pods come
        one by one (the Job controller's slow start) would see its first pod beside the last
        round's Succeeded ones and bind it alone."""
        if self.job_progress is not None:
            progress = self.job_progress
            return min(progress.succeeded, max(self.total - progress.left, 0))
        done = sum(1 for p in self.members if p.phase == SUCCEEDED)
        if not done:
            return 0
        live = sum(1 for p in self.members if p.alive)
        return min(done, max(self.total - live, 0))

    @property
    def need(self) -> int:
        """How many pending members must be placed together: the minimum, less the members
        that completed. 0 when enough completed: the rest are placed one by one."""
        return max(self.min_member - self.completed, 0)


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A Job's progress as its status counts it: ``succeeded``, its pods that Succeeded
    (those deleted since included: the Job controller counts each before its tracking
    finalizer comes off), and ``left``, the completions not yet succeeded nor failed for good
    (an index past backoffLimitPerIndex)."""

    succeeded: int
    left: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """One owner object, read as the gangs it makes.

    ``parts``: each gang it makes (by part: "" for the owner whole; a JobSet's
    "<replicatedJob>-<index>"; a LeaderWorkerSet's group index) and how many members it needs
    before any is bound. ``part_size`` is that number for parts not listed (a
    LeaderWorkerSet's groups are all alike). ``together``: parts bound as one GangGroup, all
    or none (a JobSet's replicas, unless it asks for a gang per replica). ``options``: the
    gang settings its annotations state (waiting-time, topology, mode…), overridden by the
    pods' own. ``shape`` says how the gang was formed, for ``explain``.
    """

    key: OwnerKey
    uid: str = ""
    parts: Mapping[str, int] = field(default_factory=dict)
    part_size: int | None = None
    together: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The schedulerName of each part's pods, where the owner says (a JobSet's templates; ""
    # where they do not): a part another scheduler places is never waited for in a GangGroup.
    schedulers: Mapping[str, str] = field(default_factory=dict)
    options: GangOptions = field(default_factory=GangOptions)
    # What a pod asking for its owner whole (gang-scheduler.io/owner-gang: whole) gets: a
    # NonIndexed Job's parallelism, where ``parts`` has each pod alone.
    whole_size: int | None = None
    grouping: Grouping | None = None
    priority_class: str = ""
    # Room the gang needs in the cluster, in all, before its first member binds: a Spark
    # driver's and its executors', which only the driver creates once it runs.
    min_resources: Resources | None = None
    shape: str = ""
    errors: tuple[str, ...] = ()
    # A Job's progress by its status (None for other owners, and a Job without completions).
    progress: JobProgress | None = None

    def size(self, part: str) -> int | None:
        """How many members the gang of ``part`` needs; None for a part it does not make."""
        found = self.parts.get(part)
        return found if found is not None else self.part_size


def queue_of_pod(pod: Pod, podgroups: Mapping[GangKey, PodGroup]) -> str:
    """The queue a pod counts against: its gang's PodGroup's, else its own; "" for the
    default queue."""
    if pod.gang is not None:
        podgroup = podgroups.get(pod.gang.key)
        if podgroup is not None and podgroup.queue and podgroup.api is pod.gang.source.api:
            return podgroup.queue
    return pod.queue
