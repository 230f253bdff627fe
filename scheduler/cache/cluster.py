"""The scheduler's picture of the cluster, kept current by watch events.

kube-scheduler's assume/forget pairing lives here: when a pass decides a binding, the shell
*assumes* it at once, so the next pass already counts the pod against its node although
the API server has not confirmed the bind yet; a failed bind is *forgotten*, and the pod is
pending again. An assumption ends when a watch event shows the pod bound (or gone).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.model.gangs import PodGroup
from scheduler.model.nodes import Node
from scheduler.model.pods import GangKey, Pod, PodRef
from scheduler.model.snapshot import GangState, PriorityClass, Snapshot
from scheduler.model.topology import SakkaraGroup, Topology


class ClusterCache:
    def __init__(self, *, scheduler_name: str) -> None:
        self._scheduler_name = scheduler_name
        self._pods: dict[str, Pod] = {}  # by uid
        self._nodes: dict[str, Node] = {}
        self._podgroups: dict[GangKey, PodGroup] = {}
        self._classes: dict[str, PriorityClass] = {}
        # Assumed pods are stored bound (so a snapshot is a plain copy); the pod as the API
        # server last showed it is kept here, to be restored if the assumption is forgotten.
        self._assumed: dict[str, Pod] = {}
        self._pending: set[str] = set()  # uids of our pods not bound (nor assumed)
        self._memory: dict[GangKey, GangState] = {}
        # ConfigMaps of seed 004, by "namespace/name": topologies (with why one is unusable)
        # and Sakkara groups.
        self._topologies: dict[str, tuple[Topology | None, tuple[str, ...]]] = {}
        self._groups: dict[str, SakkaraGroup] = {}
        # Whether a pass could decide anything new: set by changes that can (a pending pod of
        # ours, a node, a PodGroup or its members, freed capacity), cleared by each pass.
        # Bind confirmations and status updates of bound pods without a PodGroup cannot.
        self.dirty = True
        # Until the first pass, every object a watch delivered, relevant or not: the loop
        # starts only once the watches have delivered everything a fresh LIST shows.
        self._seen: set[tuple[str, str]] | None = set()

    def _changed(self, *, matters: bool = True) -> None:
        if matters:
            self.dirty = True

    def _matters(self, old: Pod | None, new: Pod | None) -> bool:
        """Could this pod change let a pass decide something new?"""
        for pod in (old, new):
            if pod is None:
                continue
            ours = pod.scheduler_name == self._scheduler_name
            if ours and not pod.bound:
                return True  # a pending pod of ours: work
            if ours and pod.gang is not None and pod.gang.key in self._podgroups:
                return True  # a PodGroup's counts may change
        # Capacity freed (a pod finished or went away) helps only if something waits.
        freed = old is not None and old.holds_resources and (new is None or not new.holds_resources)
        return freed and self._has_pending()

    def _has_pending(self) -> bool:
        return bool(self._pending)

    def _track(self, uid: str, pod: Pod | None) -> None:
        """Keep the set of our pending pods current (O(1) per change, not a scan)."""
        if pod is not None and pod.scheduler_name == self._scheduler_name and not pod.bound:
            self._pending.add(uid)
        else:
            self._pending.discard(uid)

    # -- pods -------------------------------------------------------------------------------

    def seen(self, kind: str, key: str) -> None:
        if self._seen is not None:
            self._seen.add((kind, key))

    def unseen(self, expected: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``expected`` no watch has delivered yet."""
        return expected - (self._seen or set())

    def stop_tracking(self) -> None:
        self._seen = None

    def _relevant(self, pod: Pod) -> bool:
        """Ours in any state, or anyone's that holds resources on a node."""
        return pod.scheduler_name == self._scheduler_name or pod.holds_resources

    def upsert_pod(self, pod: Pod) -> None:
        uid = pod.ref.uid
        self.seen("pods", uid)
        if uid in self._assumed:
            if not pod.bound:  # not confirmed yet: keep counting it where we assumed it
                self._assumed[uid] = pod
                return
            del self._assumed[uid]
        old = self._pods.get(uid)
        if self._relevant(pod):
            if old != pod:
                self._pods[uid] = pod
                self._track(uid, pod)
                self._changed(matters=self._matters(old, pod))
        elif old is not None:
            del self._pods[uid]
            self._track(uid, None)
            self._changed(matters=self._matters(old, None))

    def remove_pod(self, uid: str) -> None:
        self._assumed.pop(uid, None)
        old = self._pods.pop(uid, None)
        self._track(uid, None)
        if old is not None:
            self._changed(matters=self._matters(old, None))

    def assume(self, ref: PodRef, node: str) -> None:
        pod = self._pods.get(ref.uid)
        if pod is None or pod.bound:
            return
        self._assumed[ref.uid] = pod
        self._pods[ref.uid] = replace(pod, node_name=node)
        self._track(
            ref.uid, self._pods[ref.uid]
        )  # no pass needed: the one that assumed it counted it

    def forget(self, ref: PodRef) -> None:  # the pod is pending again: work
        original = self._assumed.pop(ref.uid, None)
        if original is not None:
            self._pods[ref.uid] = original
            self._track(ref.uid, original)
            self._changed()

    # -- everything else --------------------------------------------------------------------

    def _put(self, store: dict[Any, Any], key: Any, value: object, *, kind: str) -> None:
        self.seen(kind, str(key))
        if store.get(key) != value:
            store[key] = value
            self._changed()

    def _drop(self, store: dict[Any, Any], key: Any) -> None:
        if store.pop(key, None) is not None:
            self._changed()

    def upsert_node(self, node: Node) -> None:
        self._put(self._nodes, node.name, node, kind="nodes")

    def remove_node(self, name: str) -> None:
        self._drop(self._nodes, name)

    def upsert_podgroup(self, podgroup: PodGroup) -> None:
        self._put(self._podgroups, podgroup.key, podgroup, kind="podgroups")

    def remove_podgroup(self, key: GangKey) -> None:
        self._drop(self._podgroups, key)

    def upsert_priority_class(self, priority_class: PriorityClass) -> None:
        self._put(self._classes, priority_class.name, priority_class, kind="priorityclasses")

    def remove_priority_class(self, name: str) -> None:
        self._drop(self._classes, name)

    def upsert_topology(
        self, key: str, topology: Topology | None, errors: tuple[str, ...] = ()
    ) -> None:
        self._put(self._topologies, key, (topology, errors), kind="topologies")

    def remove_topology(self, key: str) -> None:
        self._drop(self._topologies, key)

    def upsert_group(self, key: str, group: SakkaraGroup) -> None:
        self._put(self._groups, key, group, kind="groups")

    def remove_group(self, key: str) -> None:
        self._drop(self._groups, key)

    @property
    def memory(self) -> dict[GangKey, GangState]:
        return self._memory

    def remember(self, memory: dict[GangKey, GangState]) -> None:
        """Keep what the last pass decided about each gang, for the next pass."""
        self._memory = dict(memory)
        self.dirty = False

    def update_memory(self, key: GangKey, state: GangState) -> None:
        self._memory[key] = state
        self._changed()

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        # More than one topology ConfigMap: the first by name counts (the loader warns).
        topology, errors = (
            self._topologies[min(self._topologies)] if self._topologies else (None, ())
        )
        return Snapshot(
            nodes=dict(self._nodes),
            pods=tuple(self._pods.values()),
            podgroups=dict(self._podgroups),
            priority_classes=dict(self._classes),
            memory=dict(self._memory),
            topology=topology,
            topology_errors=errors,
            groups={GangKey(g.namespace, g.name): g for _, g in sorted(self._groups.items())},
        )
