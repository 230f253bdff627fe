"""Nodes as the scheduler sees them: where pods may go and how much fits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.model.pods import Pod
from scheduler.model.resources import Resources

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What holds resources on one node: the pods (any scheduler's, assumed ones included),
    their summed requests, and the cache generation at which any of it last changed.

    Kept by the cache incrementally, copied into a snapshot only when its generation changed
    (kube-scheduler's ``UpdateSnapshot``); frozen, so a pass in another thread reads it safely.
    """

    name: str
    pods: tuple[Pod, ...] = ()
    requested: Resources = field(default_factory=Resources)
    generation: int = 0
    # The mean share of each allocatable resource that is requested: the node finder packs
    # by it (fullest first). Worked out when the info is built, so a pass need not.
    fullness: float = 0.0
    # Allocatable minus requested (negative where over-committed), likewise worked out once.
    free: Resources = field(default_factory=Resources)
    # Its pods with required anti-affinity (kube-scheduler's PodsWithRequiredAntiAffinity):
    # rare, and every pass asks for them, so a pass walks nodes, not every pod, to find them.
    anti_affinity: tuple[Pod, ...] = ()

    @classmethod
    def of(
        cls, name: str, node: Node | None, pods: tuple[Pod, ...], *, generation: int = 0
    ) -> NodeInfo:
        requested = Resources.total(p.requests for p in pods)
        return cls.with_requested(name, node, pods, requested, generation=generation)

    @classmethod
    def with_requested(
        cls,
        name: str,
        node: Node | None,
        pods: tuple[Pod, ...],
        requested: Resources,
        *,
        generation: int = 0,
    ) -> NodeInfo:
        allocatable = node.allocatable if node is not None else Resources()
        return cls(
            name=name,
            pods=pods,
            requested=requested,
            generation=generation,
            fullness=fullness(allocatable, requested),
            free=allocatable - requested,
            anti_affinity=tuple(p for p in pods if p.pod_anti_affinity),
        )


def node_infos(nodes: Mapping[str, Node], pods: Iterable[Pod]) -> dict[str, NodeInfo]:
    """Per node, what the pods that hold resources on it add up to (for snapshots that do
    not come from the cache, which keeps the same incrementally)."""
    on: dict[str, list[Pod]] = {name: [] for name in nodes}
    for pod in pods:
        if pod.holds_resources and pod.node_name in on:
            on[pod.node_name].append(pod)
    return {name: NodeInfo.of(name, nodes[name], tuple(held)) for name, held in on.items()}


def fullness(allocatable: Mapping[str, int], requested: Mapping[str, int]) -> float:
    used = [requested.get(r, 0) / a for r, a in allocatable.items() if a > 0]
    return sum(used) / len(used) if used else 0.0
