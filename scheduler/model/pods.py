"""Pods as the scheduler sees them: what they request, where they may go, which gang."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from scheduler.model.owners import Grouping, OwnerKey, OwnerKind
from scheduler.model.resources import Resources
from scheduler.model.topology import Constraints

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    namespace: str
    name: str
    uid: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # or Exists
    value: str = ""
    effect: str = ""  # empty matches every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: ``key operator values`` (In, NotIn, Exists, Gt …)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """One container's requests of extended resources (a name with a domain, say
    ``nvidia.com/gpu``, or a device class's ``deviceclass.resource.kubernetes.io/<class>``),
    kept for the nodes where devices serve them: kube-scheduler names each device request
    after the container's ``index`` (init containers first) and the resource's index among
    ``keys``, all its request names sorted. ``short_lived``: an init container that ends
    before the others start (not a sidecar), whose devices the others may reuse."""

    index: int
    name: str
    short_lived: bool
    keys: tuple[str, ...]
    asks: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PodClaim:
    """An entry of a pod's ``spec.resourceClaims`` (dynamic resource allocation): the
    ResourceClaim it names, or the template the ResourceClaim controller makes one from,
    whose name is then read from the pod's ``status.resourceClaimStatuses`` ("" until the
    controller has made it)."""

    name: str
    claim: str = ""
    template: str = ""

    def same_entry(self, other: PodClaim) -> bool:
        """Whether it states what ``other`` states (name, and the claim or the template it
        names): a pod's entry equal to one of its PodGroup's is that group's claim."""
        if (self.name, self.template) != (other.name, other.template):
            return False
        return bool(self.template) or self.claim == other.claim


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold; a pod's terms are alternatives (any one may hold)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A label selector: ``match_labels`` and ``match_expressions`` must all hold. The empty
    selector matches everything; where the API has no selector (null), ``None`` is used and
    matches nothing, as ``metav1.LabelSelectorAsSelector`` does."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One required pod (anti-)affinity term, as kube-scheduler's ``AffinityTerm``: the pods
    it is about are those ``selector`` matches in ``namespaces`` (the owner's own namespace
    when the term names none and has no namespace selector) or in a namespace whose labels
    ``namespace_selector`` matches. ``matchLabelKeys`` are merged into the selector by the
    API server when the pod is created, so they need nothing here."""

    selector: LabelSelector | None
    topology_key: str
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One of ``topologySpreadConstraints``, with the API's defaults filled in. The pods it
    counts are those of the owner's namespace that ``selector`` matches (with the owner's
    values of ``match_label_keys`` added, as kube-scheduler merges them)."""

    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule (a filter); else ScheduleAnyway (a score)
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (the default) or Ignore
    honor_node_taints: bool = False  # nodeTaintsPolicy: Ignore (the default) or Honor
    match_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    """A container port with a hostPort: it takes (protocol, port) on the node, on one IP
    or, with no IP (0.0.0.0), on all of them."""

    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"  # the wildcard address: what the API defaults to


class Mode(Enum):
    """Koordinator's gang modes: Strict keeps nothing unless the gang places whole."""

    STRICT = "Strict"
    NON_STRICT = "NonStrict"


@dataclass(frozen=True, slots=True, order=True)
class GangKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodGroupApi(Enum):
    """The PodGroup kinds a gang may be declared with, by apiVersion. They share a name
    space for gangs (namespace/name); which one a gang's PodGroup is of is the one its pods
    name (``GangSource.api``)."""

    OURS = "scheduling.x-k8s.io/v1alpha1"  # scheduler-plugins' schema, our CRD
    WORKLOAD = "scheduling.k8s.io/v1alpha2"  # the upstream Workload API (kube-scheduler)
    VOLCANO = "scheduling.volcano.sh/v1beta1"  # Volcano's (and, by its annotation, kube-batch's)

    @property
    def kind(self) -> str:
        """The name the cache and the watches know this kind by (a LIST's key)."""
        return _KINDS[self]

    @property
    def said(self) -> str:
        """How messages name the kind: the upstream one by its group, as it is served at
        the version the cluster's release serves (``value`` is only its 1.36 version)."""
        return "scheduling.k8s.io" if self is PodGroupApi.WORKLOAD else self.value


_KINDS = {
    PodGroupApi.OURS: "podgroups",
    PodGroupApi.WORKLOAD: "workload-podgroups",
    PodGroupApi.VOLCANO: "volcano-podgroups",
}


class GangSource(Enum):
    """Where a pod's gang membership was declared."""

    POD_GROUP = "scheduling.x-k8s.io/pod-group label"
    LEGACY = "pod-group.scheduling.sigs.k8s.io"
    KOORDINATOR = "gang.scheduling.koordinator.sh annotations"
    SAKKARA = "sakkara.group.name label"
    WORKLOAD = "spec.schedulingGroup.podGroupName"
    VOLCANO = "scheduling.k8s.io/group-name annotation"
    OWNER = "owner"  # no gang declared: the pod's owner (a Job, a JobSet, …) makes it

    @property
    def api(self) -> PodGroupApi:
        """The kind of PodGroup a pod declaring its gang this way names."""
        if self is GangSource.WORKLOAD:
            return PodGroupApi.WORKLOAD
        if self is GangSource.VOLCANO:
            return PodGroupApi.VOLCANO
        return PodGroupApi.OURS

    @property
    def needs_podgroup(self) -> bool:
        """Whether the pods say nothing of the gang's size: its PodGroup does."""
        return self not in (GangSource.KOORDINATOR, GangSource.SAKKARA, GangSource.OWNER)


@dataclass(frozen=True, slots=True)
class NetworkTopology:
    """Volcano's ``networkTopology``: ``hard`` keeps the pods inside one domain of
    tier ``highest_tier`` (1 the lowest above the nodes) or of the tier named
    ``highest_tier_name``; ``soft`` prefers it and places anyway."""

    mode: str = "hard"
    highest_tier: int | None = None
    highest_tier_name: str = ""
    # Or the level whose domains are read from this node label (a 1.37 PodGroup's
    # schedulingConstraints.topology key).
    label_key: str = ""


@dataclass(frozen=True, slots=True)
class SubGroupPolicy:
    """One entry of Volcano's ``spec.subGroupPolicy``. The gang's pods that
    ``selector`` matches (every pod when None) and that carry every label of
    ``match_label_keys`` form subgroups, one per distinct tuple of those labels' values; each
    subgroup is placed whole (``size`` members at least) or not at all, and the gang needs
    ``min_subgroups`` of them. Each subgroup keeps to ``topology`` where stated."""

    name: str
    size: int = 1
    min_subgroups: int = 0
    match_label_keys: tuple[str, ...] = ()
    selector: LabelSelector | None = None
    topology: NetworkTopology | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GangOptions:
    """Koordinator's optional gang settings, as a pod or a PodGroup states them.
    ``None`` means not stated."""

    min_available: int | None = None
    total_number: int | None = None
    waiting_seconds: float | None = None
    starvation_seconds: float | None = None  # gang-scheduler.io/starvation-after
    expected_seconds: float | None = None  # gang-scheduler.io/expected-duration
    stale_seconds: float | None = None  # gang-scheduler.io/stale-after; inf: "never"
    mode: Mode | None = None
    groups: tuple[GangKey, ...] | None = None
    # gang-scheduler.io/topology-constraints, when stated.
    constraints: Constraints | None = None
    # gang-scheduler.io/subgroup-policy, when stated: Volcano's subGroupPolicy as JSON.
    subgroup_policy: tuple[SubGroupPolicy, ...] | None = None
    # gang-scheduler.io/network-topology, when stated: a networkTopology as JSON.
    network_topology: NetworkTopology | None = None
    # Errors in the gang annotations, each naming the annotation and what is allowed.
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GangClaim(GangOptions):
    """What one pod says about its gang: which one, how it says so, and its options."""

    key: GangKey
    source: GangSource
    # A gang from the pod's owner (source OWNER): which owner, which part of it, and the
    # grouping the pod asks for (gang-scheduler.io/owner-gang), if it does.
    owner: OwnerKey | None = None
    part: str = ""
    grouping: Grouping | None = None
    # A pod in a PodGroup by its spec.schedulingGroup (source WORKLOAD): the gang its owner
    # would make of it otherwise, which counts where the PodGroup is the owner's own basic
    # one (Readiness: core.gangs.resolve).
    fallback: GangClaim | None = None


@dataclass(frozen=True, slots=True)
class Disruption:
    """A pod's DisruptionTarget condition as a scheduler's eviction writes it."""

    reason: str
    by: str
    since: float  # its lastTransitionTime, seconds since the epoch
    whole_gang: bool = False  # its gang was chosen whole


@dataclass(frozen=True, slots=True)
class Pod:
    ref: PodRef
    requests: Resources
    scheduler_name: str = ""
    node_name: str = ""
    phase: str = PENDING
    priority: int | None = None  # spec.priority; None if admission did not resolve it
    priority_class: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[NodeSelectorTerm, ...] = ()  # required during scheduling; any may hold
    tolerations: tuple[Toleration, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    created: float = 0.0  # seconds since the epoch
    deleting: bool = False
    gang: GangClaim | None = None
    timed_out: bool = False  # carries gang.scheduling.koordinator.sh/timeout=true
    first_attempt: float | None = None  # gang-scheduler.io/first-attempt, when written
    expected_start: str = ""  # gang-scheduler.io/expected-start, when written
    bound_by: str = ""  # gang-scheduler.io/bound-by: the scheduler whose bind placed it
    # spec.activeDeadlineSeconds: the kubelet ends it that long after it starts, at the latest.
    deadline_seconds: int | None = None
    # When it started (status.startTime) and, once it ran to its end, when its last container
    # finished, seconds since the epoch; None until then, or if not said.
    started: float | None = None
    finished: float | None = None
    # spec.schedulingGates by name: while any is left the pod is not placed (kube-scheduler's
    # PreEnqueue), whatever its gang does.
    gates: tuple[str, ...] = ()
    # status.conditions' PodScheduled as (status, reason, message, lastTransitionTime), if any:
    # the scheduler writes Unschedulable there as kube-scheduler does, only when it differs.
    scheduled_condition: tuple[str, str, str, str] | None = None
    # Required inter-pod affinity and anti-affinity, and the host ports the pod takes.
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    # The PersistentVolumeClaims its volumes name (generic ephemeral ones as <pod>-<volume>),
    # and the ResourceClaims it asks devices through (dynamic resource allocation).
    claims: tuple[str, ...] = ()
    # Those of ``claims`` that generic ephemeral volumes name: made by the ephemeral volume
    # controller, and only usable by the pod that controls them.
    ephemeral_claims: frozenset[str] = frozenset()
    resource_claims: tuple[PodClaim, ...] = ()
    # Its containers' requests of extended resources, by container, while no ResourceClaim
    # serves them: where no node publishes one but a DeviceClass serves it, the scheduler
    # makes a claim for them (its status then names that claim, in ``resource_claims``).
    extended: tuple[ContainerAsk, ...] = ()
    # Preferences, weighed when choosing among the nodes that fit: preferred node affinity
    # (weight, term), preferred pod affinity and anti-affinity (weight, term), and the
    # scoring the pod asks for by annotation ("pack" or "spread"; "" for the scheduler's).
    preferred_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    preferred_pod_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    preferred_pod_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    scoring: str = ""
    preempts: bool = True  # spec.preemptionPolicy is not Never
    # status.nominatedNodeName: where a preemption made room for it (read back on restart).
    nominated_node: str = ""
    # The queue it names, by our label or Volcano's annotation; "" when it names none.
    queue: str = ""
    # The batch/v1 Job that controls it, by name and uid ("" for none): a gang of one Job's
    # pods counts its completions by the Job's status (``Gang.completed``).
    job: str = ""
    job_uid: str = ""
    # Consolidation may move it: annotated gang-scheduler.io/movable "true", and owned by a
    # controller, which makes it again once evicted.
    movable: bool = False
    # Marked for eviction by a scheduler (its DisruptionTarget condition): the reason
    # (PreemptionByScheduler, StaleGang), who marked it (the scheduler name its message
    # begins with) and when; None if unmarked.
    disrupted: Disruption | None = None

    @property
    def prefers(self) -> bool:
        """Whether it states a preference among the nodes that fit."""
        return bool(
            self.preferred_affinity
            or self.preferred_pod_affinity
            or self.preferred_pod_anti_affinity
            or any(not c.hard for c in self.spread)
        )

    @property
    def neighbourly(self) -> bool:
        """Whether where it may go depends on the other pods (not only on room)."""
        return bool(
            self.pod_affinity
            or self.pod_anti_affinity
            or self.host_ports
            or any(c.hard for c in self.spread)
        )

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def alive(self) -> bool:
        """Neither finished nor being deleted: it can still run (or is running)."""
        return not self.deleting and self.phase not in TERMINAL_PHASES

    @property
    def holds_resources(self) -> bool:
        """Bound and not finished: its requests count against its node."""
        return bool(self.node_name) and self.phase not in TERMINAL_PHASES


# A gang of one is keyed by its pod; "/" cannot occur in a gang name, so keys never clash.
SINGLE_PREFIX = "pod/"


def job_of(pod: Pod) -> OwnerKey | None:
    """The batch/v1 Job that controls ``pod``, if any."""
    return OwnerKey(pod.ref.namespace, OwnerKind.JOB, pod.job) if pod.job else None


def gang_key_of(pod: Pod) -> GangKey:
    """The gang a pod belongs to: the one it names, else a gang of one of its own."""
    return pod.gang.key if pod.gang else GangKey(pod.ref.namespace, SINGLE_PREFIX + pod.ref.name)
