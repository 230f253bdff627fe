"""Everything one scheduling pass looks at, frozen: the cluster and the scheduler's memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.model.gangs import PodGroup
from scheduler.model.nodes import Node
from scheduler.model.pods import GangKey, Pod, PodRef
from scheduler.model.topology import SakkaraGroup, Topology


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class GangState:
    """What the scheduler remembers of a gang between passes (lost on restart, by design:
    what must survive a restart is written to the API server and read back from there)."""

    first_attempt: float | None = None  # the gang's timeout counts from here
    attempts: int = 0
    retry_at: float = 0.0  # backoff: not tried again before this
    timed_out: bool = False
    satisfied: bool = False
    # NonStrict only: members placed in earlier passes, held (never bound) until the gang fits.
    reservations: Mapping[PodRef, str] = field(default_factory=dict)
    # The last thing said about the gang, so the same Event is not repeated every pass.
    last_message: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: Mapping[str, Node]
    pods: tuple[Pod, ...]
    podgroups: Mapping[GangKey, PodGroup] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    memory: Mapping[GangKey, GangState] = field(default_factory=dict)
    # From the sakkara.topology ConfigMap; None without one (node labels or flat instead).
    topology: Topology | None = None
    # Why the topology ConfigMap cannot be used; topology-placed gangs wait while it is so.
    topology_errors: tuple[str, ...] = ()
    groups: Mapping[GangKey, SakkaraGroup] = field(default_factory=dict)
