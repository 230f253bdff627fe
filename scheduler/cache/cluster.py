"""The scheduler's picture of the cluster, kept current by watch events.

kube-scheduler's assume/forget pairing lives here: when a pass decides a binding, the shell
*assumes* it at once, so the next pass already counts the pod against its node although
the API server has not confirmed the bind yet; a failed bind is *forgotten*, and the pod is
pending again. An assumption ends when a watch event shows the pod bound (or gone).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.model.gangs import PodGroup
from scheduler.model.nodes import Node
from scheduler.model.pods import GangKey, Pod, PodRef
from scheduler.model.snapshot import GangState, PriorityClass, Snapshot


class ClusterCache:
    def __init__(self, *, scheduler_name: str) -> None:
        self._scheduler_name = scheduler_name
        self._pods: dict[str, Pod] = {}  # by uid
        self._nodes: dict[str, Node] = {}
        self._podgroups: dict[GangKey, PodGroup] = {}
        self._classes: dict[str, PriorityClass] = {}
        self._assumed: dict[str, str] = {}  # pod uid -> node
        self._memory: dict[GangKey, GangState] = {}
        self.generation = 0  # bumped on every change, so the loop can tell if anything moved

    def _changed(self) -> None:
        self.generation += 1

    # -- pods -------------------------------------------------------------------------------

    def _relevant(self, pod: Pod) -> bool:
        """Ours in any state, or anyone's that holds resources on a node."""
        return pod.scheduler_name == self._scheduler_name or pod.holds_resources

    def upsert_pod(self, pod: Pod) -> None:
        uid = pod.ref.uid
        if pod.bound:
            self._assumed.pop(uid, None)
        if self._relevant(pod):
            if self._pods.get(uid) != pod:
                self._pods[uid] = pod
                self._changed()
        elif self._pods.pop(uid, None) is not None:
            self._changed()

    def remove_pod(self, uid: str) -> None:
        self._assumed.pop(uid, None)
        if self._pods.pop(uid, None) is not None:
            self._changed()

    def assume(self, ref: PodRef, node: str) -> None:
        self._assumed[ref.uid] = node
        self._changed()

    def forget(self, ref: PodRef) -> None:
        if self._assumed.pop(ref.uid, None) is not None:
            self._changed()

    def is_assumed(self, ref: PodRef) -> bool:
        return ref.uid in self._assumed

    # -- everything else --------------------------------------------------------------------

    def upsert_node(self, node: Node) -> None:
        if self._nodes.get(node.name) != node:
            self._nodes[node.name] = node
            self._changed()

    def remove_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._changed()

    def upsert_podgroup(self, podgroup: PodGroup) -> None:
        if self._podgroups.get(podgroup.key) != podgroup:
            self._podgroups[podgroup.key] = podgroup
            self._changed()

    def remove_podgroup(self, key: GangKey) -> None:
        if self._podgroups.pop(key, None) is not None:
            self._changed()

    def upsert_priority_class(self, priority_class: PriorityClass) -> None:
        if self._classes.get(priority_class.name) != priority_class:
            self._classes[priority_class.name] = priority_class
            self._changed()

    def remove_priority_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self._changed()

    @property
    def memory(self) -> dict[GangKey, GangState]:
        return self._memory

    def remember(self, memory: dict[GangKey, GangState]) -> None:
        """Keep what the last pass decided about each gang, for the next pass."""
        self._memory = dict(memory)

    def update_memory(self, key: GangKey, state: GangState) -> None:
        self._memory[key] = state
        self._changed()

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        pods = tuple(
            replace(pod, node_name=self._assumed[uid]) if uid in self._assumed else pod
            for uid, pod in self._pods.items()
        )
        return Snapshot(
            nodes=dict(self._nodes),
            pods=pods,
            podgroups=dict(self._podgroups),
            priority_classes=dict(self._classes),
            memory=dict(self._memory),
        )

    def pod(self, uid: str) -> Pod | None:
        return self._pods.get(uid)
