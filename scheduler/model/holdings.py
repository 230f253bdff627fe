"""What the queues' pods hold, node by node and summed.

A pass's queue book starts from what every queue's bound pods hold, what of it is leaving
(pods being deleted) and the room the queues share (the ready, schedulable nodes' allocatable
less what other schedulers' pods hold there). Walking every bound pod for it each pass cost
122 ms at 5,000 nodes and 50,000 pods; the cache keeps each node's part and the
sums instead, and changes them only for the nodes that changed (``ClusterCache``), with the
same ``NodeHoldings.on`` as the walk a snapshot built by hand gets (``holdings``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.model.devices import Classes, ResourceClaim, pod_devices
from scheduler.model.gangs import PodGroup, queue_of_pod
from scheduler.model.nodes import Node, NodeInfo
from scheduler.model.pods import GangKey, Pod, gang_key_of
from scheduler.model.queues import DEFAULT_QUEUE, QueueCensus
from scheduler.model.resources import Resources


@dataclass(frozen=True, slots=True)
class NodeHoldings:
    """One node's part: what our pods there hold by queue, what of it is leaving, and the
    room it gives the queues (its allocatable less other schedulers' pods; none unless
    ready and schedulable). Our pods on a node that is not (or no longer) there still hold
    their queue's room until they are gone."""

    held: Mapping[str, Resources] = field(default_factory=dict)
    leaving: Mapping[str, Resources] = field(default_factory=dict)
    room: Resources = field(default_factory=Resources)

    @classmethod
    def on(
        cls,
        info: NodeInfo | None,
        node: Node | None,
        *,
        ours: frozenset[str],
        podgroups: Mapping[GangKey, PodGroup],
    ) -> NodeHoldings:
        usable = node is not None and node.ready and not node.unschedulable
        held: dict[str, dict[str, int]] = {}
        leaving: dict[str, dict[str, int]] = {}
        room = dict(node.allocatable.amounts) if usable and node is not None else {}
        # The walk of a snapshot built by hand (and the cache's first sum) goes through
        # every bound pod here: plain loops.
        for pod in info.pods if info is not None else ():
            if not pod.holds_resources:
                continue
            requests = pod.requests.amounts
            if pod.scheduler_name in ours:
                queue = queue_of_pod(pod, podgroups) or DEFAULT_QUEUE
                into = held.get(queue)
                if into is None:
                    into = held[queue] = {}
                for resource, amount in requests.items():
                    into[resource] = into.get(resource, 0) + amount
                if pod.deleting:
                    _add(leaving.setdefault(queue, {}), requests)
            elif usable:
                for resource, amount in requests.items():  # another scheduler's: no queue's
                    room[resource] = room.get(resource, 0) - amount
        return cls(
            held={q: Resources(a) for q, a in held.items()},
            leaving={q: Resources(a) for q, a in leaving.items()},
            room=Resources(room),
        )

    def moved(
        self,
        moves: Iterable[tuple[int, Pod]],
        *,
        node: Node | None,
        ours: frozenset[str],
        podgroups: Mapping[GangKey, PodGroup],
    ) -> NodeHoldings:
        """This part with pods come (+1) and gone (-1) since it was made, each counted as
        ``on`` counts it; ``node`` as it was then (a node that changed is walked anew). A
        bind changes a node by one pod: walking all of the node's pods again for it made
        each pass walk every bound pod once the scheduler had packed them (60 a node)."""
        usable = node is not None and node.ready and not node.unschedulable
        held = {queue: dict(amounts.amounts) for queue, amounts in self.held.items()}
        leaving = {queue: dict(amounts.amounts) for queue, amounts in self.leaving.items()}
        room = dict(self.room.amounts)
        for sign, pod in moves:
            if not pod.holds_resources:
                continue
            requests = pod.requests.amounts
            if pod.scheduler_name in ours:
                queue = queue_of_pod(pod, podgroups) or DEFAULT_QUEUE
                _add(held.setdefault(queue, {}), requests, sign=sign)
                if pod.deleting:
                    _add(leaving.setdefault(queue, {}), requests, sign=sign)
            elif usable:
                _add(room, requests, sign=-sign)
        return NodeHoldings(
            held={q: Resources(a) for q, a in held.items()},
            leaving={q: Resources(a) for q, a in leaving.items()},
            room=Resources(room),
        )


@dataclass(frozen=True, slots=True)
class QueueHoldings:
    """The nodes' parts summed: by queue name (the default queue by its name), and the
    room; ``ours``: the scheduler names whose pods were counted as the queues' (a pass
    configured with other names walks the pods itself)."""

    held: Mapping[str, Resources]
    leaving: Mapping[str, Resources]
    room: Resources
    ours: frozenset[str]


class HoldingsSum:
    """Running sums of nodes' parts, a part given and taken back as its node changes."""

    def __init__(self) -> None:
        self._held: dict[str, dict[str, int]] = {}
        self._leaving: dict[str, dict[str, int]] = {}
        self._room: dict[str, int] = {}

    def add(self, part: NodeHoldings, *, sign: int = 1) -> None:
        for queue, amounts in part.held.items():
            _add(self._held.setdefault(queue, {}), amounts, sign=sign)
        for queue, amounts in part.leaving.items():
            _add(self._leaving.setdefault(queue, {}), amounts, sign=sign)
        _add(self._room, part.room, sign=sign)

    def frozen(self, ours: frozenset[str]) -> QueueHoldings:
        return QueueHoldings(
            held=_nonzero(self._held), leaving=_nonzero(self._leaving),
            room=Resources(self._room), ours=ours,
        )  # fmt: skip


def census(
    pods: Iterable[Pod],
    podgroups: Mapping[GangKey, PodGroup],
    claims: Mapping[tuple[str, str], ResourceClaim] | None = None,
    classes: Classes | None = None,
) -> QueueCensus:
    """What every pod of ours counts for its queue: the room bound ones hold (their
    devices included, ``pod_devices`` of ``claims``), and the gangs
    running (a member bound) and waiting (a member pending), by queue ("" for the default).
    A walk over every pod, for the Queues' status every few seconds, never in a pass: in
    plain sums (a ``Resources`` made per pod takes 0.2 s at 60,000 pods, and the walk, on
    the event loop, would hold it 0.5-1 s at 10,000 nodes), in a worker thread."""
    held: dict[str, dict[str, int]] = {}
    running: dict[str, set[GangKey]] = {}
    pending: dict[str, set[GangKey]] = {}
    for pod in pods:
        if not pod.alive:
            continue
        queue = queue_of_pod(pod, podgroups)
        if pod.bound:
            into = held.get(queue)
            if into is None:
                into = held[queue] = {}
            for resource, amount in pod.requests.amounts.items():
                into[resource] = into.get(resource, 0) + amount
            if pod.resource_claims and claims:
                for resource, amount in pod_devices(pod, claims, classes).items():
                    into[resource] = into.get(resource, 0) + amount
            running.setdefault(queue, set()).add(gang_key_of(pod))
        else:
            pending.setdefault(queue, set()).add(gang_key_of(pod))
    waiting = {q: len(g - running.get(q, set())) for q, g in pending.items()}
    return QueueCensus(  # a gang with a member bound runs, whoever else waits
        held={q: Resources(a) for q, a in held.items()},
        running={q: len(g) for q, g in running.items()},
        pending={q: n for q, n in waiting.items() if n},
    )


def holdings(
    nodes: Mapping[str, Node],
    infos: Mapping[str, NodeInfo],
    *,
    ours: frozenset[str],
    podgroups: Mapping[GangKey, PodGroup],
) -> QueueHoldings:
    """Every node's part, summed: the walk over every bound pod."""
    total = HoldingsSum()
    for name in _names(nodes, infos):
        total.add(NodeHoldings.on(infos.get(name), nodes.get(name), ours=ours, podgroups=podgroups))
    return total.frozen(ours)


def _names(nodes: Mapping[str, Node], infos: Mapping[str, NodeInfo]) -> Iterable[str]:
    yield from infos
    yield from (name for name in nodes if name not in infos)


def _add(into: dict[str, int], amounts: Mapping[str, int], *, sign: int = 1) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + sign * amount


def _nonzero(by_queue: dict[str, dict[str, int]]) -> dict[str, Resources]:
    """Queues that hold something (a part taken back leaves zeros behind)."""
    kept = {queue: Resources(amounts) for queue, amounts in by_queue.items()}
    return {queue: amounts for queue, amounts in kept.items() if amounts}
