"""Storage as the scheduler sees it: the claims pods name, the volumes they are or may be
bound to, how their storage classes bind and provision, and how many volumes each node may
attach. Only what decides where a pod may go, and what binding it writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.model.pods import LabelSelector, NodeSelectorTerm

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
IMMEDIATE = "Immediate"
# A class whose volumes are all made by hand (local PVs): nothing provisions for it.
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# Written on a claim by the scheduler that chose the node its volume is to be made on.
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
# Written on a claim by the PV controller once its binding is complete.
BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
# Written on a volume bound by a controller (or a scheduler), not pre-bound by its user.
BOUND_BY_CONTROLLER_ANNOTATION = "pv.kubernetes.io/bound-by-controller"
# Read before spec.storageClassName, as the PV controller reads it.
BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"

AVAILABLE = "Available"  # a PersistentVolume's status.phase when no claim holds it
# The access mode of a claim one pod in the cluster may use at a time.
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim: bound once ``volume`` names its PersistentVolume.

    ``requested`` is spec.resources.requests.storage in bytes; ``access_modes`` and
    ``block`` (volumeMode Block; Filesystem otherwise) must be served by the volume it is
    bound to; ``selected_node`` is where the scheduler asked for its volume to be made
    (None: not asked). ``errors`` say what in it cannot be read (a malformed size)."""

    namespace: str
    name: str
    volume: str = ""  # spec.volumeName
    storage_class: str = ""
    deleting: bool = False
    uid: str = ""
    requested: int = 0
    access_modes: frozenset[str] = frozenset()
    block: bool = False
    # spec.selector: the labels a volume must carry to be bound to it (None: any volume).
    selector: LabelSelector | None = None
    attributes_class: str = ""  # spec.volumeAttributesClassName
    bind_completed: bool = False
    selected_node: str | None = None
    # Who last wrote the selected-node annotation (the field manager owning it in
    # metadata.managedFields) and when (seconds since the epoch; None if unknown).
    selected_by: str = ""
    selected_at: float | None = None
    errors: tuple[str, ...] = ()
    resource_version: str = ""
    # The uid of the object that controls it (its controller ownerReference): for a
    # generic ephemeral volume's claim, the pod it was made for.
    controller_uid: str = ""
    lost: bool = False  # status.phase Lost: its volume is gone

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def exclusive(self) -> bool:
        """One pod's at a time in the whole cluster (ReadWriteOncePod)."""
        return READ_WRITE_ONCE_POD in self.access_modes

    @property
    def fully_bound(self) -> bool:
        """Bound as kube-scheduler requires before it binds a pod using it: it names its
        volume and the PV controller has completed the binding."""
        return bool(self.volume) and self.bind_completed


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """Which claim a volume is bound (or pre-bound) to; an empty uid matches any claim of
    that name."""

    namespace: str
    name: str
    uid: str = ""

    def names(self, claim: Claim) -> bool:
        return (
            claim.namespace == self.namespace
            and claim.name == self.name
            and (not self.uid or self.uid == claim.uid)
        )


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume; ``node_affinity`` is its required node selector terms (any may
    hold), empty where the volume can be reached from every node. ``capacity`` is in
    bytes; ``csi_driver`` names the CSI driver serving it (counted against the node's
    attach limit), "" for another kind of volume."""

    name: str
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    capacity: int = 0
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    block: bool = False
    attributes_class: str = ""
    claim: ClaimRef | None = None
    phase: str = AVAILABLE
    labels: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False
    csi_driver: str = ""
    volume_handle: str = ""  # spec.csi.volumeHandle
    errors: tuple[str, ...] = ()
    # What a write of its claimRef is conditional on: no other binder took it meanwhile.
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class TopologyTerm:
    """A StorageClass's allowedTopologies term: every (key, values) must hold on the node
    (its label's value among the values)."""

    match: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class StorageClass:
    """A StorageClass: when its claims are bound (Immediate, or WaitForFirstConsumer, when
    the scheduler chooses the node first) and who provisions their volumes where."""

    name: str
    binding_mode: str = IMMEDIATE
    provisioner: str = ""
    # Where its volumes may be made; empty: anywhere. Any term may hold.
    allowed_topologies: tuple[TopologyTerm, ...] = ()

    @property
    def waits_for_first_consumer(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER


@dataclass(frozen=True, slots=True)
class CsiNode:
    """A node's CSINode: how many volumes of each CSI driver it may have attached
    (``allocatable.count``, where the driver states one)."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CsiDriver:
    """A CSIDriver: whether it publishes its storage capacity, so that a volume of a class
    it provisions is made only where a CSIStorageCapacity says there is room."""

    name: str
    storage_capacity: bool = False


@dataclass(frozen=True, slots=True)
class StorageCapacity:
    """A CSIStorageCapacity: how much a driver may still make for ``storage_class`` on the
    nodes ``node_topology`` selects (None: on none). ``maximum_volume_size`` (bytes), where
    given, bounds one volume; ``capacity`` (bytes) is what is left in all; None where not
    given (or not readable)."""

    namespace: str
    name: str
    storage_class: str
    node_topology: LabelSelector | None = None
    capacity: int | None = None
    maximum_volume_size: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    """A volume attached (or being attached) to a node by a CSI driver (``attacher``)."""

    name: str
    node: str
    attacher: str
    volume: str  # the PersistentVolume's name; "" for an inline volume
