"""The node cache (kube-scheduler's backend cache): the nodes, and per node what holds
resources there (kube-scheduler's NodeInfo): the pods, their summed requests, and a
generation taken from one counter that every change advances.

kube-scheduler's assume/forget pairing lives here too: when a pass decides a binding, the
shell *assumes* it at once, so the next pass already counts the pod against its node
although the API server has not confirmed the bind yet; a failed bind is *forgotten*, and
the pod is pending again. An assumption ends when a watch event shows the pod bound (or
gone). Assumed pods are stored bound (so a snapshot is a plain copy); the pod as the API
server last showed it is kept in ``assumed``, to be restored if the assumption is forgotten.

``rebuild`` makes the frozen ``NodeInfo`` of the nodes changed since it last ran and keeps
the rest as they are, so a snapshot costs the changes, not the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scheduler.model.gangs import PodGroup
from scheduler.model.holdings import HoldingsSum, NodeHoldings, QueueHoldings
from scheduler.model.nodes import Node, NodeInfo
from scheduler.model.pods import GangKey, Pod, PodGroupApi
from scheduler.model.resources import Resources


class NodeCache:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        # The pods the cache keeps (ours in any state, anyone's holding resources), by uid.
        self.pods: dict[str, Pod] = {}
        self.assumed: dict[str, Pod] = {}  # by uid: as the API server last showed them
        # Per node: the pods holding resources there, by uid, and their summed requests.
        self._on_node: dict[str, dict[str, Pod]] = {}
        self._requested: dict[str, dict[str, int]] = {}
        self.generation = 0
        self._node_generation: dict[str, int] = {}
        self.infos: dict[str, NodeInfo] = {}  # as of the last rebuild
        self._stale: set[str] = set()  # nodes changed since the last rebuild
        # With queues: each node's part of what the queues' pods hold and the sums
        # (``scheduler.model.holdings``), changed only for the nodes that changed or whose
        # pods' PodGroup changed queue (``_requeue``), against each gang's PodGroup queue
        # as last summed; kept only while the API server serves Queues.
        self._holdings: dict[str, NodeHoldings] = {}
        self._holdings_sum = HoldingsSum()
        self._holdings_live = False
        self._requeue: set[str] = set()
        # Pods come (+1) to or gone (-1) from a node since its part was made, for the nodes
        # not to be walked anew: their parts change by these alone.
        self._moved: dict[str, list[tuple[int, Pod]]] = {}
        self._holdings_queues: dict[GangKey, tuple[str, PodGroupApi]] = {}

    def advance(self) -> int:
        """A new generation with no node changed (something else changed): it."""
        self.generation += 1
        return self.generation

    def touch(self, node: str) -> None:
        """Something on ``node`` changed: its info is rebuilt, at a new generation, and its
        part of what the queues hold is made anew from its pods."""
        self._changed(node)
        self._requeue.add(node)

    def _changed(self, node: str) -> None:
        self.generation += 1
        self._node_generation[node] = self.generation
        self._stale.add(node)

    def _pod_moved(self, node: str, sign: int, pod: Pod) -> None:
        """``pod`` came to (+1) or left (-1) ``node``: its info is rebuilt; its part of what
        the queues hold changes by the pod alone."""
        self._changed(node)
        if self._holdings_live and node not in self._requeue:
            self._moved.setdefault(node, []).append((sign, pod))

    def account(self, uid: str, pod: Pod) -> None:
        """``pod`` holds its requests on its node."""
        self._on_node.setdefault(pod.node_name, {})[uid] = pod
        room = self._requested.setdefault(pod.node_name, {})
        for resource, amount in pod.requests.items():
            room[resource] = room.get(resource, 0) + amount
        self._pod_moved(pod.node_name, 1, pod)

    def unaccount(self, uid: str, pod: Pod) -> None:
        """``pod`` no longer holds its requests on its node."""
        pods = self._on_node.get(pod.node_name)
        counted = None if pods is None else pods.pop(uid, None)
        if pods is None or counted is None:
            return
        room = self._requested[pod.node_name]
        for resource, amount in pod.requests.items():
            room[resource] = room.get(resource, 0) - amount
        if not pods:
            del self._on_node[pod.node_name]
            del self._requested[pod.node_name]
        self._pod_moved(pod.node_name, -1, counted)

    def upsert(self, node: Node) -> bool:
        """Keep ``node``; whether it changed."""
        if self.nodes.get(node.name) == node:
            return False
        self.touch(node.name)
        self.nodes[node.name] = node
        return True

    def remove(self, name: str) -> bool:
        """Forget node ``name``; whether it was there."""
        if name not in self.nodes:
            return False
        self.touch(name)
        del self.nodes[name]
        return True

    def rebuild(self) -> list[NodeInfo]:
        """Rebuild the infos of the nodes changed since the last rebuild; the rebuilt ones."""
        rebuilt = []
        for name in self._stale:
            pods = self._on_node.get(name)
            if name not in self.nodes and not pods:
                self.infos.pop(name, None)
                self._node_generation.pop(name, None)
                continue
            info = self.infos[name] = NodeInfo.with_requested(
                name,
                self.nodes.get(name),
                tuple(pods.values()) if pods else (),
                Resources(self._requested.get(name, {})),
                generation=self._node_generation.get(name, 0),
            )
            rebuilt.append(info)
        self._stale.clear()
        return rebuilt

    def room(self) -> tuple[dict[str, Resources], dict[str, Resources]]:
        """The free and the allocatable room of the ready, schedulable nodes, as of the last
        rebuild."""
        free: dict[str, Resources] = {}
        allocatable: dict[str, Resources] = {}
        for name, node in self.nodes.items():
            info = self.infos.get(name)
            if node.ready and not node.unschedulable and info is not None:
                free[name], allocatable[name] = info.free, node.allocatable
        return free, allocatable

    def allocatable_total(self) -> dict[str, int]:
        """The allocatable room of the ready, schedulable nodes, summed."""
        total: dict[str, int] = {}
        for node in self.nodes.values():
            if node.ready and not node.unschedulable:
                for resource, amount in node.allocatable.items():
                    total[resource] = total.get(resource, 0) + amount
        return total

    # -- what the queues' pods hold ---------------------------------------------------------

    def forget_holdings(self) -> None:
        """No Queues served: no sums kept (summed afresh if they come back)."""
        self._holdings_live = False
        self._holdings.clear()
        self._moved.clear()
        self._requeue.clear()

    def queue_holdings(
        self,
        podgroups: Mapping[GangKey, PodGroup],
        *,
        ours: frozenset[str],
        members: Callable[[GangKey], Iterable[Pod]],
    ) -> QueueHoldings:
        """What the queues' pods hold, the parts of the nodes changed since the last time
        worked out again (all of them the first time): O(pods that came or went, and the
        pods of nodes that changed otherwise), where the walk a pass would do is O(bound
        pods). ``members``: a gang's pods of ours."""
        if not self._holdings_live:
            self._holdings_live = True
            self._holdings.clear()
            self._holdings_sum = HoldingsSum()
            self._holdings_queues = {}
            self._requeue = {*self.infos, *self.nodes}
            self._moved.clear()
        # A gang whose PodGroup came, went or names another queue: its bound members' nodes,
        # and those a member left since (it is no member now, and was counted as one).
        queues = {key: (podgroup.queue, podgroup.api) for key, podgroup in podgroups.items()}
        before = self._holdings_queues
        requeued = {key for key in {*queues, *before} if queues.get(key) != before.get(key)}
        for key in requeued:
            self._requeue.update(p.node_name for p in members(key) if p.node_name)
        if requeued:
            self._requeue.update(
                name
                for name, moves in self._moved.items()
                if any(p.gang is not None and p.gang.key in requeued for _, p in moves)
            )
        self._holdings_queues = queues
        for name, moves in self._moved.items():
            old = self._holdings.get(name)
            if name in self._requeue or old is None or name not in self.infos:
                self._requeue.add(name)  # walked whole below
                continue
            part = old.moved(moves, node=self.nodes.get(name), ours=ours, podgroups=podgroups)
            self._holdings_sum.add(old, sign=-1)
            self._holdings[name] = part
            self._holdings_sum.add(part)
        self._moved.clear()
        for name in self._requeue:
            old = self._holdings.pop(name, None)
            if old is not None:
                self._holdings_sum.add(old, sign=-1)
            info, node = self.infos.get(name), self.nodes.get(name)
            if info is None and node is None:
                continue
            part = NodeHoldings.on(info, node, ours=ours, podgroups=podgroups)
            self._holdings[name] = part
            self._holdings_sum.add(part)
        self._requeue.clear()
        return self._holdings_sum.frozen(ours)
