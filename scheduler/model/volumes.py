"""Storage as the scheduler sees it: the claims pods name, the volumes they are bound to,
and how their storage classes bind. Only what decides where a pod may go."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.pods import NodeSelectorTerm

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim: bound once ``volume`` names its PersistentVolume."""

    namespace: str
    name: str
    volume: str = ""  # spec.volumeName
    storage_class: str = ""
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume; ``node_affinity`` is its required node selector terms (any may
    hold), empty where the volume can be reached from every node."""

    name: str
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
