"""Devices handed out by dynamic resource allocation (``resource.k8s.io/v1``), as the
scheduler sees them: the ResourceSlices drivers publish, the DeviceClasses that name kinds
of device, the ResourceClaims pods ask through, and what an allocation writes back.

Only what decides which devices a claim may get: the scheduler never reads a device's
configuration, it copies it into the allocation as kube-scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scheduler.model.pods import NodeSelectorTerm, Pod, Toleration

# An allocation holds at most this many devices, and a claim is reserved for at most this
# many consumers (``resourceapi.AllocationResultsMaxSize``, ``ResourceClaimReservedForMaxSize``).
MAX_RESULTS = 32
MAX_RESERVED = 256

EXACT_COUNT = "ExactCount"
ALL = "All"

# Kubernetes names the devices of each DeviceClass as an extended resource of its own
# (``deviceclass.resource.kubernetes.io/<class>``, KEP-5004, as a ResourceQuota counts them):
# a queue's capability, guarantee and holdings say devices by that name.
DEVICE_CLASS_RESOURCE = "deviceclass.resource.kubernetes.io/"

# A pod's extended resources that devices serve are asked through one ResourceClaim the
# scheduler makes for the pod (KEP-5004): it carries this annotation ("true"), the pod as its
# controlling owner, and is named in the pod's ``status.extendedResourceClaimStatus``. Until
# it is made, its requests are planned under a name no real claim can have.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
EXTENDED_CLAIM_NAME = "<extended-resources>"

# The finalizer kube-scheduler puts on a claim before it writes an allocation; the
# ResourceClaim controller clears the allocation (and the finalizer) once no pod is left.
FINALIZER = "resource.kubernetes.io/delete-protection"


class SelectorError(Exception):
    """A CEL selector that does not compile, or fails on a device (a missing attribute)."""


class DeviceId(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class Attribute(NamedTuple):
    """A device attribute: ``kind`` is int, bool, string or version (the API's one-of);
    values of different kinds never match, whatever Python thinks of ``True == 1``."""

    kind: str
    value: int | bool | str


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = ""  # NoSchedule, NoExecute (None is informational)


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice. ``attributes`` and ``capacity`` are keyed by their qualified
    name as published (``index`` or ``gpu.example.com/index``); a capacity is kept as its
    quantity text, which selectors compare through ``quantity()``."""

    name: str
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)  # quantity text, e.g. "80Gi"
    taints: tuple[DeviceTaint, ...] = ()
    # Shown to selectors; such a device is still allocated to one claim at a time here
    # (consumable capacity, beyond GA, is not supported: kube-scheduler may share it).
    allow_multiple_allocations: bool = False
    # Partitionable devices and binding conditions (features beyond GA): never allocated
    # here, rather than allocated wrongly.
    unsupported: str = ""


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """Devices of one pool (or part of it) and where they can be reached: one node
    (``node_name``), nodes matching ``node_selector``, or every node."""

    name: str
    driver: str
    pool: str
    generation: int = 0
    slice_count: int = 1  # spec.pool.resourceSliceCount
    node_name: str = ""
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] | None = None  # None: not selector-based
    devices: tuple[Device, ...] = ()
    unsupported: str = ""  # per-device node selection, shared counters


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions, all must hold
    config: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)  # raw entries
    # spec.extendedResourceName: the extended resource (say nvidia.com/gpu) its devices
    # serve and are counted as; "" for none.
    extended_resource_name: str = ""
    # Where two classes name the same extended resource, the newer serves it.
    created: float = 0.0


@dataclass(frozen=True, slots=True)
class SubRequest:
    """What one request (or one ``firstAvailable`` alternative) asks: ``count`` devices of
    ``device_class`` (or all of them) that satisfy ``selectors``."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A claim's request: ``exactly`` one kind, or the first of ``first_available`` that
    can be had."""

    name: str
    exactly: SubRequest | None = None
    first_available: tuple[SubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class MatchAttribute:
    """Every device allocated for ``requests`` (all of the claim's when empty) has the same
    value of ``attribute`` (a fully qualified name)."""

    attribute: str
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceResult:
    request: str  # "<request>" or "<request>/<subrequest>"
    device: DeviceId
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class Allocation:
    """``status.allocation``: the devices, the configuration copied from classes and claim
    (raw, in order), and the nodes that reach them (None: every node)."""

    results: tuple[DeviceResult, ...]
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    config: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)

    @property
    def devices(self) -> tuple[DeviceId, ...]:
        return tuple(r.device for r in self.results)

    @property
    def held(self) -> tuple[DeviceId, ...]:
        """The devices it keeps from other claims: admin access keeps none."""
        return tuple(r.device for r in self.results if not r.admin_access)


# The reservedFor entry naming an upstream PodGroup.
GROUP_CONSUMER_API, GROUP_CONSUMER_RESOURCE = "scheduling.k8s.io", "podgroups"


class Consumer(NamedTuple):
    """An entry of ``status.reservedFor``."""

    resource: str
    name: str
    uid: str
    api_group: str = ""

    @property
    def is_pod(self) -> bool:
        return (self.api_group, self.resource) == ("", "pods")

    @property
    def is_podgroup(self) -> bool:
        """An upstream PodGroup (1.37's DRAWorkloadResourceClaims)."""
        return (self.api_group, self.resource) == (GROUP_CONSUMER_API, GROUP_CONSUMER_RESOURCE)


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[MatchAttribute, ...] = ()
    config: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)  # raw entries
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    owner_uid: str = ""  # the uid of its controlling owner (a pod, for claims from templates)
    extended: bool = False  # made by a scheduler for a pod's extended resources
    # What the API server would have rejected (a constraint of no known kind, a request of
    # neither form): the claim cannot be allocated, and this says why.
    problem: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def reserved_for_pod(self, uid: str) -> bool:
        return any(c.is_pod and c.uid == uid for c in self.reserved_for)

    def reserved_for_group(self, group: Consumer) -> bool:
        """Whether it is reserved for the PodGroup ``group`` (by name: its pods do not know
        its uid, and the kubelet matches it so)."""
        return any(c.is_podgroup and c.name == group.name for c in self.reserved_for)


def group_consumer(name: str, uid: str) -> Consumer:
    """The reservedFor entry of a claim reserved for an upstream PodGroup (1.37's
    DRAWorkloadResourceClaims, ``resourceclaim.BindTo``)."""
    return Consumer(GROUP_CONSUMER_RESOURCE, name, uid, api_group=GROUP_CONSUMER_API)


Classes = Mapping[str, DeviceClass]


def class_resource(device_class: str, classes: Classes | None = None) -> str:
    """The resource name a queue counts ``device_class``'s devices by: the class's
    ``extendedResourceName``, else upstream's implicit name for it."""
    known = classes.get(device_class) if classes is not None else None
    if known is not None and known.extended_resource_name:
        return known.extended_resource_name
    return DEVICE_CLASS_RESOURCE + device_class


def served_by(resource: str, classes: Classes) -> tuple[str, ...]:
    """The classes whose devices count as ``resource``, by name: none for a class that does
    not exist, nor for the implicit name of one that names an ``extendedResourceName``
    (its devices count as that)."""
    return tuple(sorted(name for name in classes if class_resource(name, classes) == resource))


def is_extended_resource(name: str) -> bool:
    """Whether a pod may ask devices for ``name`` as an extended resource: a name with a
    domain outside ``kubernetes.io`` (``nvidia.com/gpu``), or a class's implicit name."""
    if name.startswith(DEVICE_CLASS_RESOURCE):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def extended_classes(classes: Classes) -> dict[str, str]:
    """The class that serves each extended resource name: a class's implicit name always
    its own; an ``extendedResourceName`` the newest class naming it (the lower name between
    two of the same age), as kube-scheduler resolves a migration from one class to another."""
    served: dict[str, str] = {DEVICE_CLASS_RESOURCE + name: name for name in classes}
    chosen: dict[str, DeviceClass] = {}
    for c in classes.values():
        name = c.extended_resource_name
        if not name:
            continue
        have = chosen.get(name)
        if have is None or (c.created, have.name) > (have.created, c.name):
            chosen[name] = c
    served.update((name, c.name) for name, c in chosen.items())
    return served


def claim_devices(claim: ResourceClaim, classes: Classes | None = None) -> dict[str, int]:
    """The devices ``claim`` holds (allocated: each device of its results, admin access
    none, as it keeps no device from others) or asks (not yet: each request's count; of
    ``firstAvailable``, the most any alternative asks of each class, whichever is given;
    ``All`` counts nothing until allocated, the number being the node's), by their class's
    resource name."""
    class_of: dict[str, str] = {}  # by "<request>" or "<request>/<subrequest>"
    for request in claim.requests:
        if request.exactly is not None:
            class_of[request.name] = request.exactly.device_class
        for sub in request.first_available:
            class_of[f"{request.name}/{sub.name}"] = sub.device_class
    counted: dict[str, int] = {}
    if claim.allocation is not None:
        for result in claim.allocation.results:
            device_class = class_of.get(result.request)
            if device_class is not None and not result.admin_access:
                name = class_resource(device_class, classes)
                counted[name] = counted.get(name, 0) + 1
        return counted
    for request in claim.requests:
        most: dict[str, int] = {}
        for sub in (request.exactly,) if request.exactly else request.first_available:
            if sub.mode == EXACT_COUNT and not sub.admin_access:
                name = class_resource(sub.device_class, classes)
                most[name] = max(most.get(name, 0), sub.count)
        for name, count in most.items():
            counted[name] = counted.get(name, 0) + count
    return counted


def pod_devices(
    pod: Pod,
    claims: Mapping[tuple[str, str], ResourceClaim],
    classes: Classes | None = None,
    *,
    users: Mapping[tuple[str, str], int] | None = None,
    asked_only: bool = False,
) -> dict[str, int]:
    """The devices ``pod`` counts for in its queue: those of the ResourceClaims it alone
    uses (made from its template, reserved for it and no one else, or not reserved yet and
    named by no other pod: ``users`` counts the pods naming each claim), by class. A claim
    several pods share is no one pod's: it counts for none of them (nor would evicting one
    of them free it). ``asked_only``: only the claims not allocated yet (the devices a
    placement must still find)."""
    devices: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for entry in pod.resource_claims:
        key = (pod.ref.namespace, entry.claim)
        claim = claims.get(key) if entry.claim and key not in seen else None
        seen.add(key)
        if claim is None or (asked_only and claim.allocation is not None):
            continue
        uid = pod.ref.uid
        if claim.reserved_for:
            alone = all(c.uid == uid for c in claim.reserved_for)
        else:
            alone = claim.owner_uid == uid or (
                users is not None and users.get(key) == 1 and claim.allocation is None
            )
        if alone:
            for name, count in claim_devices(claim, classes).items():
                devices[name] = devices.get(name, 0) + count
    return devices
