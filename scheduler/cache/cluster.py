"""The scheduler's picture of the cluster, kept current by watch events.

kube-scheduler's assume/forget pairing lives here: when a pass decides a binding, the shell
*assumes* it at once, so the next pass already counts the pod against its node although
the API server has not confirmed the bind yet; a failed bind is *forgotten*, and the pod is
pending again. An assumption ends when a watch event shows the pod bound (or gone).

Per node the cache keeps what holds resources on it (kube-scheduler's NodeInfo): the pods,
their summed requests, and a generation taken from one counter that every change advances.
A snapshot rebuilds the frozen ``NodeInfo`` of the nodes changed since the last one and
copies the rest as they are, so taking one costs the changes, not the cluster.

Likewise per gang: a snapshot holds the pods of the *active* gangs only (those with a member
waiting to be placed, and those whose pods or PodGroup changed since the last snapshot, with
the rest of their GangGroups). A settled gang has nothing to decide until one of its objects
changes; its memory is carried over as it is. A gang the core *parked* (it failed for want of
room) is left out too, until a node changes so that one of its members' requests fit the
node's free room, its own objects change, or its flush or timeout falls due: the core makes
the exact check (static filters too), the cache only the cheap one that keeps a thousand
waiting gangs out of every pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.model.budgets import DisruptionBudget
from scheduler.model.decisions import ClaimWrite
from scheduler.model.devices import Consumer, DeviceClass, ResourceClaim, ResourceSlice
from scheduler.model.gangs import Owner, PodGroup, queue_of_pod
from scheduler.model.holdings import HoldingsSum, NodeHoldings, QueueHoldings
from scheduler.model.nodes import Node, NodeInfo
from scheduler.model.owners import OwnerKey, OwnerKind, owners_of
from scheduler.model.pods import GangKey, Pod, PodGroupApi, PodRef, gang_key_of, job_of
from scheduler.model.queues import (
    DEFAULT_QUEUE,
    Queue,
    QueueStatus,
    QueueUsage,
    beyond_default,
)
from scheduler.model.resources import Resources
from scheduler.model.snapshot import GangState, PriorityClass, Snapshot
from scheduler.model.topology import SakkaraGroup, Topology
from scheduler.model.volumes import Claim, Volume

QUEUES = "queues"  # the kind Volcano's Queues are watched as


class ClusterCache:
    def __init__(  # noqa: PLR0915 (every index the cache keeps, declared in one place)
        self,
        *,
        scheduler_name: str,
        aliases: tuple[str, ...] = (),
        selectors: Callable[[str, str, Any], bool] | None = None,
    ) -> None:
        # How device selectors (CEL) are evaluated, handed to every snapshot: the shell gives
        # codecs.cel's, whose compiled selectors outlive a pass.
        self.selectors = selectors
        # Pods that name any of these are ours (``Config.scheduler_names``).
        self._names = frozenset((scheduler_name, *aliases))
        self._pods: dict[str, Pod] = {}  # by uid
        self._ours: dict[str, Pod] = {}  # our pods, in any state, by uid
        # Per node: the pods holding resources there, by uid, and their summed requests.
        self._on_node: dict[str, dict[str, Pod]] = {}
        self._requested: dict[str, dict[str, int]] = {}
        self._generation = 0
        self._node_generation: dict[str, int] = {}
        self._infos: dict[str, NodeInfo] = {}  # as of the last snapshot
        self._stale: set[str] = set()  # nodes changed since the last snapshot
        # With queues (#22): each node's part of what the queues' pods hold and the sums
        # (``scheduler.model.holdings``), changed only for the nodes that changed or whose
        # pods' PodGroup changed queue (``_requeue``), against each gang's PodGroup queue
        # as last summed; kept only while the API server serves Queues.
        self._holdings: dict[str, NodeHoldings] = {}
        self._holdings_sum = HoldingsSum()
        self._holdings_live = False
        self._requeue: set[str] = set()
        self._holdings_queues: dict[GangKey, tuple[str, PodGroupApi]] = {}
        # Our pods by gang; gangs changed since the last snapshot; who names whom in groups.
        self._members: dict[GangKey, dict[str, Pod]] = {}
        self._touched: set[GangKey] = set()
        self._named_by: dict[GangKey, set[GangKey]] = {}
        # Parked gangs (from the memory): by the requests of their pending members, when they
        # fall due, and those woken by a node change (with the parking they were woken from).
        self._parked_by_shape: dict[Resources, set[GangKey]] = {}
        self._due_at: dict[GangKey, float] = {}
        # Running gangs below their minimum (#23): when the rest is to be evicted; such a
        # gang has nothing pending, so nothing else puts it in the pass that is due then.
        self._stale_due: dict[GangKey, float] = {}
        self._woken: dict[GangKey, int | None] = {}
        # With queues (#22): parked gangs by each queue they were parked under, and the
        # queues a bound pod of ours left since the last snapshot (room freed in them).
        self._parked_by_queue: dict[str, set[GangKey]] = {}
        self._freed_queues: set[str] = set()
        # Set when a change the cache cannot attribute (a topology or group ConfigMap, a
        # PriorityClass, a pass that failed) may help any gang: the next snapshot is whole.
        self._everything = True
        self._nodes: dict[str, Node] = {}
        # PodGroups of every kind, by kind: the same name may be taken in several.
        self._podgroups: dict[PodGroupApi, dict[GangKey, PodGroup]] = {a: {} for a in PodGroupApi}
        # The owners that make gangs (Jobs, JobSets, …) by kind and "namespace/name"; the
        # kinds served and readable (all, until an informer finds one is not); the gangs
        # each owner makes, from its pods (a JobSet's replicas are one GangGroup).
        self._owners: dict[OwnerKind, dict[str, Owner]] = {k: {} for k in OwnerKind}
        self._owner_kinds: set[OwnerKind] = set(OwnerKind)
        self._owned: dict[OwnerKey, set[GangKey]] = {}
        self._owners_of_gang: dict[GangKey, set[OwnerKey]] = {}  # the same, the other way
        self._ever_served: set[OwnerKind] = set()
        self._classes: dict[str, PriorityClass] = {}
        # Volcano's Queues by name (#22), and whether the API server serves them (until the
        # informer says so, not: then there are no queues, as before #22).
        self._queues: dict[str, Queue] = {}
        self._queues_served = False
        self._queue_statuses: dict[str, QueueStatus] = {}  # as the API server shows them
        self._namespaces: dict[str, Mapping[str, str]] = {}  # name -> labels
        # Storage: claims by "namespace/name", volumes and storage classes by name.
        self._claims: dict[str, Claim] = {}
        self._volumes: dict[str, Volume] = {}
        self._modes: dict[str, str] = {}
        # Dynamic resource allocation (#24): ResourceSlices and DeviceClasses by name,
        # ResourceClaims by (namespace, name), and the claims as binds in flight wrote them
        # (until a watch shows them allocated, or the write failed and is forgotten).
        self._slices: dict[str, ResourceSlice] = {}
        self._device_classes: dict[str, DeviceClass] = {}
        self._resource_claims: dict[tuple[str, str], ResourceClaim] = {}
        # (per claim, every group's write in flight: one group's failure must not drop what
        # another still writes, review of #24)
        self._assumed_claims: dict[tuple[str, str], list[ClaimWrite]] = {}
        # PodDisruptionBudgets by "namespace/name": read by preemption only, so a change
        # wakes no gang (it makes no room).
        self._budgets: dict[str, DisruptionBudget] = {}
        # Assumed pods are stored bound (so a snapshot is a plain copy); the pod as the API
        # server last showed it is kept here, to be restored if the assumption is forgotten.
        self._assumed: dict[str, Pod] = {}
        # Our pods not bound (nor assumed): their gangs by uid, and how many per gang.
        self._pending: dict[str, GangKey] = {}
        self._pending_in: dict[GangKey, int] = {}
        self._memory: dict[GangKey, GangState] = {}
        # Time-based fair share (#22): the queues' recent usage, as the last pass left it.
        self.queue_usage: QueueUsage | None = None
        # The tree the last pass with a gang stating a tier placed on (for the
        # stranded-by-topology gauge, #26).
        self.placed_on: Topology | None = None
        self._updated: set[GangKey] = set()  # memory the shell changed since the last snapshot
        # ConfigMaps of seed 004, by "namespace/name": topologies (with why one is unusable)
        # and Sakkara groups.
        self._topologies: dict[str, tuple[Topology | None, tuple[str, ...]]] = {}
        self._groups: dict[str, SakkaraGroup] = {}
        # Whether a pass could decide anything new: set by changes that can (a pending pod of
        # ours, a node, a PodGroup or its members, freed capacity, a bind confirmed while its
        # gang has members waiting), cleared by each pass. Other bind confirmations and
        # status updates of bound pods without a PodGroup cannot.
        self.dirty = True
        # Whether the change could place or free anything, as opposed to a change of a bound
        # member of a PodGroup gang with nobody of its gang (or GangGroup) waiting: its bind
        # confirmed, it started running, it finished or went while nothing waits. A pass
        # would only recount the gang's status, and status writes wait behind binds anyway.
        # The loop runs a pass for those at most once a second: a backlog of 625 gangs ran
        # ~200 such passes between its binds, each over every gang whose member changed.
        self.urgent = True
        # Until the first pass, every object a watch delivered, relevant or not: the loop
        # starts only once the watches have delivered everything a fresh LIST shows.
        self._seen: set[tuple[str, str]] | None = set()
        # When each object was last delivered, on a counter of deliveries: a re-list removes
        # only what it misses *and* what no watch delivered since the re-list began.
        self._delivered = 0
        self._stamps: dict[str, dict[str, int]] = {}

    def _changed(self, *, matters: bool = True, urgent: bool = True) -> None:
        if matters:
            self.dirty = True
            self.urgent = self.urgent or urgent

    def _pod_changed(self, old: Pod | None, new: Pod | None) -> None:
        """Could this pod change let a pass decide something new, and is it more than a
        recount of a PodGroup's members? Called once the change is tracked."""
        # Capacity freed (a pod finished or went away) helps only if something waits.
        freed = old is not None and old.holds_resources and (new is None or not new.holds_resources)
        if freed and old.bound and old.scheduler_name in self._names:
            self._free_queue(old)  # before any return below (review of #23)
        counts = False
        for pod in (old, new):
            if pod is None or pod.scheduler_name not in self._names:
                continue
            if not pod.bound:
                self._changed()  # a pending pod of ours: work
                return
            if self._gang_waits(pod):
                # A bound member of a gang with members waiting: its confirmed bind may be
                # what the rest waits for (a gang is satisfied only by confirmed binds, and
                # nothing of its GangGroup is placed while its binds are in flight), its
                # end may make the gang a new incarnation.
                self._changed()
                return
            if pod.gang is not None and self._podgroup(pod.gang.key) is not None:
                counts = True  # a PodGroup's counts may change
        if freed and self.waiting > 0:
            self._changed()
        elif counts:
            self._changed(urgent=False)

    def _free_queue(self, pod: Pod) -> None:
        """A bound pod of ours stopped holding its room: its queue (and those above it)
        hold less, whatever node it was on, one already deleted included (chaos seed
        30092: a queue's room freed by pods of a deleted node, its parked gangs woken only
        by the flush, 60 s on). Recorded even while nothing is parked: the pass in flight may
        be parking a gang on the room this pod held."""
        if not self._queues_served or not self._queues:
            return
        key = pod.gang.key if pod.gang is not None else None
        podgroup = self._podgroup(key) if key is not None else None
        queue = queue_of_pod(pod, {key: podgroup} if key is not None and podgroup else {})
        self._freed_queues.add(queue or DEFAULT_QUEUE)

    @property
    def waiting(self) -> int:
        """How many of our pods are neither bound nor assumed."""
        return len(self._pending)

    def _gang_waits(self, pod: Pod) -> bool:
        """Whether a pod of the gang of ``pod``, or of a gang of its GangGroup, is neither
        bound nor assumed."""
        if not self._pending_in:
            return False
        key = gang_key_of(pod)
        if key in self._pending_in:
            return True
        related = (*(pod.gang.groups or ()), *self._named_by.get(key, ())) if pod.gang else ()
        if pod.gang is not None and pod.gang.owner is not None:
            related = (*related, *self._owned.get(pod.gang.owner, ()))
        return any(k in self._pending_in for k in related)

    def _pend(self, uid: str, key: GangKey | None) -> None:
        """Count ``uid`` as waiting in gang ``key`` (None: not waiting)."""
        was = self._pending.get(uid)
        if was == key:
            return
        if was is not None:
            del self._pending[uid]
            left = self._pending_in[was] - 1
            if left:
                self._pending_in[was] = left
            else:
                del self._pending_in[was]
        if key is not None:
            self._pending[uid] = key
            self._pending_in[key] = self._pending_in.get(key, 0) + 1

    def _track(self, uid: str, pod: Pod | None) -> None:
        """Keep the set of our pending pods and the per-node accounting current (O(1) per
        change, not a scan). ``self._pods[uid]`` must still be the old pod when called."""
        old = self._pods.get(uid)
        if old is not None and old.holds_resources:
            self._unaccount(uid, old)
        if pod is not None and pod.holds_resources:
            self._account(uid, pod)
        ours = pod is not None and pod.scheduler_name in self._names
        was = self._ours.get(uid)
        if was is not None and (not ours or gang_key_of(was) != gang_key_of(pod)):
            self._leave_gang(uid, was)
        if ours:
            self._ours[uid] = pod
            self._join_gang(uid, pod)
        else:
            self._ours.pop(uid, None)
        self._pend(uid, gang_key_of(pod) if ours and not pod.bound else None)

    def _join_gang(self, uid: str, pod: Pod) -> None:
        key = gang_key_of(pod)
        members = self._members.setdefault(key, {})
        was = members.get(uid)
        members[uid] = pod
        if (
            was is not None
            and was.first_attempt != pod.first_attempt
            and replace(was, first_attempt=pod.first_attempt) == pod
        ):
            return  # our own first-attempt mark came back: nothing for a pass to decide
        self._touched.add(key)
        for named in (pod.gang.groups or ()) if pod.gang else ():
            self._named_by.setdefault(named, set()).add(key)
        for owner in _owners_of_pod(pod):
            self._owned.setdefault(owner, set()).add(key)
            self._owners_of_gang.setdefault(key, set()).add(owner)

    def _leave_gang(self, uid: str, pod: Pod) -> None:
        key = gang_key_of(pod)
        members = self._members.get(key)
        if members is not None and members.pop(uid, None) is not None and not members:
            del self._members[key]
            self._memory.pop(key, None)  # the gang is gone: so is what was remembered of it
            # Every owner any member named (members of two Jobs; a member whose Job changed).
            for owner in self._owners_of_gang.pop(key, ()):
                gangs = self._owned.get(owner)
                if gangs is not None:
                    gangs.discard(key)
                    if not gangs:
                        del self._owned[owner]
        self._touched.add(key)

    def touch_gang(self, key: GangKey) -> None:
        """Have the next pass look at ``key`` again (a status write that failed, say)."""
        self._touched.add(key)
        self._changed()

    def touch_pod(self, ref: PodRef) -> None:
        """Have the next pass look at the gang of ``ref`` again (its mark not written)."""
        pod = self._pods.get(ref.uid)
        if pod is not None:
            self.touch_gang(gang_key_of(pod))

    def _touch(self, node: str) -> None:
        self._generation += 1
        self._node_generation[node] = self._generation
        self._stale.add(node)

    def _account(self, uid: str, pod: Pod) -> None:
        self._on_node.setdefault(pod.node_name, {})[uid] = pod
        room = self._requested.setdefault(pod.node_name, {})
        for resource, amount in pod.requests.items():
            room[resource] = room.get(resource, 0) + amount
        self._touch(pod.node_name)

    def _unaccount(self, uid: str, pod: Pod) -> None:
        pods = self._on_node.get(pod.node_name)
        if pods is None or pods.pop(uid, None) is None:
            return
        room = self._requested[pod.node_name]
        for resource, amount in pod.requests.items():
            room[resource] = room.get(resource, 0) - amount
        if not pods:
            del self._on_node[pod.node_name]
            del self._requested[pod.node_name]
        self._touch(pod.node_name)

    # -- pods -------------------------------------------------------------------------------

    def seen(self, kind: str, key: str) -> None:
        self._delivered += 1
        self._stamps.setdefault(kind, {})[key] = self._delivered
        if self._seen is not None:
            self._seen.add((kind, key))

    @property
    def delivered(self) -> int:
        """How many objects the watches have delivered so far (a point in their stream)."""
        return self._delivered

    def _held(self, kind: str) -> dict[str, Any] | set[str]:
        """The keys of ``kind`` in the cache, as the re-list names them."""
        return {
            "pods": self._pods,
            "nodes": self._nodes,
            **{api.kind: {str(key) for key in self._podgroups[api]} for api in PodGroupApi},
            "priorityclasses": self._classes,
            "namespaces": self._namespaces,
            "persistentvolumeclaims": self._claims,
            "persistentvolumes": self._volumes,
            "resourceslices": self._slices,
            "deviceclasses": self._device_classes,
            "resourceclaims": {f"{ns}/{name}" for ns, name in self._resource_claims},
            "storageclasses": self._modes,
            "poddisruptionbudgets": self._budgets,
            QUEUES: self._queues,
            **{k.kind: self._owners[k] for k in OwnerKind},
        }[kind]

    def vanished(self, kind: str, listed: set[str], *, since: int) -> list[str]:
        """Keys of ``kind`` in the cache that a LIST begun at ``since`` did not show and no
        watch delivered after it: objects deleted while no watch was there to say so."""
        held = self._held(kind)
        stamps = self._stamps.get(kind, {})
        return sorted(k for k in held if k not in listed and stamps.get(k, 0) <= since)

    def stale(self, kind: str, key: str, *, since: int) -> bool:
        """Whether a LIST begun at ``since`` knows ``key`` better than the cache does: no
        watch delivered it, nor its deletion, since. A LIST is a consistent read, newer than
        anything delivered before it began; what a watch delivered after may be newer."""
        return self._stamps.get(kind, {}).get(key, 0) <= since

    def prune(self, kind: str, *, since: int) -> None:
        """Forget the marks of deletions that a LIST begun at ``since`` has seen past."""
        held = self._held(kind)
        stamps = self._stamps.get(kind, {})
        for key in [k for k, stamp in stamps.items() if stamp <= since and k not in held]:
            del stamps[key]

    def _unstamp(self, kind: str, key: str) -> None:
        """A deletion is a delivery too: a LIST begun before it must not bring the object
        back (the mark is pruned once a later LIST has seen past it)."""
        self._delivered += 1
        self._stamps.setdefault(kind, {})[key] = self._delivered

    def unseen(self, expected: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``expected`` no watch has delivered yet."""
        return expected - (self._seen or set())

    def stop_tracking(self) -> None:
        self._seen = None

    @property
    def synced(self) -> bool:
        """Whether the first sync is over (watches delivered all a LIST showed)."""
        return self._seen is None

    def _relevant(self, pod: Pod) -> bool:
        """Ours in any state, or anyone's that holds resources on a node."""
        return pod.scheduler_name in self._names or pod.holds_resources

    def upsert_pod(self, pod: Pod) -> None:
        uid = pod.ref.uid
        self.seen("pods", uid)
        confirmed = False
        if uid in self._assumed:
            if not pod.bound:  # not confirmed yet: keep counting it where we assumed it
                self._assumed[uid] = pod
                return
            del self._assumed[uid]
            confirmed = True
        old = self._pods.get(uid)
        if self._relevant(pod):
            # A confirmation just as assumed changes no field, but the bind is no longer in
            # flight: what a gang's waiting members wait for (see _pod_changed).
            if old != pod or confirmed:
                self._track(uid, pod)
                self._pods[uid] = pod
                self._pod_changed(old, pod)
        elif old is not None:
            self._track(uid, None)
            del self._pods[uid]
            self._pod_changed(old, None)

    def scheduler_name_of(self, uid: str) -> str | None:
        """The spec.schedulerName of our pod ``uid``, None if it is not ours (or gone)."""
        pod = self._ours.get(uid)
        return pod.scheduler_name if pod is not None else None

    def remove_pod(self, uid: str) -> None:
        self._unstamp("pods", uid)
        self._assumed.pop(uid, None)
        self._track(uid, None)
        old = self._pods.pop(uid, None)
        if old is not None:
            self._pod_changed(old, None)

    def assume(self, ref: PodRef, node: str) -> None:
        pod = self._pods.get(ref.uid)
        if pod is None or pod.bound:
            return
        self._assumed[ref.uid] = pod
        assumed = replace(pod, node_name=node)
        self._track(ref.uid, assumed)  # no pass needed: the one that assumed it counted it
        self._pods[ref.uid] = assumed

    def forget(self, ref: PodRef) -> None:  # the pod is pending again: work
        original = self._assumed.pop(ref.uid, None)
        if original is not None:
            self._track(ref.uid, original)
            self._pods[ref.uid] = original
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
        if self._nodes.get(node.name) != node:
            self._touch(node.name)
        self._put(self._nodes, node.name, node, kind="nodes")

    def remove_node(self, name: str) -> None:
        self._unstamp("nodes", name)
        if name in self._nodes:
            self._touch(name)
        self._drop(self._nodes, name)

    def upsert_podgroup(self, podgroup: PodGroup) -> None:
        """A change of the spec (or the annotations folded into it) is work for a pass. A
        change of the status alone is not: the status is what passes write, and the watch
        brings back each write (a pass each). A pass reads it only for a gang it has no
        memory of (``_recovered_state``: the first pass after a start, which looks at
        everything); the next pass that looks at the gang sees the stored one."""
        store = self._podgroups[podgroup.api]
        old = store.get(podgroup.key)
        self.seen(podgroup.api.kind, str(podgroup.key))
        if old == podgroup:
            return
        store[podgroup.key] = podgroup
        if old is not None and replace(old, status=podgroup.status) == podgroup:
            return
        self._touched.add(podgroup.key)
        for named in podgroup.groups or ():
            self._named_by.setdefault(named, set()).add(podgroup.key)
        self._changed()

    def remove_podgroup(self, key: GangKey, api: PodGroupApi = PodGroupApi.OURS) -> None:
        self._unstamp(api.kind, str(key))
        self._touched.add(key)
        self._drop(self._podgroups[api], key)

    def _podgroup(self, key: GangKey) -> PodGroup | None:
        """The PodGroup of gang ``key``: of the kind its members name, when more than one
        kind has a PodGroup of that name."""
        found = [store[key] for store in self._podgroups.values() if key in store]
        if len(found) < 2:
            return found[0] if found else None
        members = self._members.get(key, {}).values()
        api = next((p.gang.source.api for p in members if p.gang is not None), PodGroupApi.OURS)
        return next((pg for pg in found if pg.api is api), found[0])

    def _podgroups_by_gang(self) -> dict[GangKey, PodGroup]:
        """One PodGroup per gang name, for the snapshot (see ``_podgroup``)."""
        merged: dict[GangKey, PodGroup] = dict(self._podgroups[PodGroupApi.OURS])
        for api in (PodGroupApi.WORKLOAD, PodGroupApi.VOLCANO):
            for key, podgroup in self._podgroups[api].items():
                chosen = self._podgroup(key) if key in merged else podgroup
                merged[key] = chosen or podgroup
        return merged

    def upsert_owner(self, owner: Owner) -> None:
        """An owner's change (its size, its annotations) is work for the gangs it makes."""
        key = f"{owner.key.namespace}/{owner.key.name}"
        store = self._owners[owner.key.kind]
        self.seen(owner.key.kind.kind, key)
        if store.get(key) == owner:
            return
        store[key] = owner
        gangs = self._owned.get(owner.key)
        if gangs:  # only an owner of pods of ours is work (not every Job of the cluster)
            self._touched.update(gangs)
            self._changed()

    def remove_owner(self, kind: OwnerKind, key: str) -> None:
        self._unstamp(kind.kind, key)
        gone = self._owners[kind].pop(key, None)
        gangs = self._owned.get(gone.key) if gone is not None else None
        if gangs:
            self._touched.update(gangs)
            self._changed()

    def _owners_of_ours(self) -> dict[OwnerKey, Owner]:
        """The owners that make gangs of our pods (and their JobSets' Jobs): a cluster's
        other Jobs are no pass's business."""
        found: dict[OwnerKey, Owner] = {}
        for key in self._owned:
            owner = self._owners[key.kind].get(f"{key.namespace}/{key.name}")
            if owner is not None:
                found[key] = owner
        return found

    def serve(self, kind: str, served: bool) -> None:
        """Whether the API server serves ``kind`` and lets us list it: pods of an owner
        kind that is not are placed as they come, rather than wait for an owner never seen;
        without Queues served, there are no queues."""
        if kind == QUEUES:
            if served != self._queues_served:
                self._queues_served = served
                self._everything = True
                self._changed()
            return
        owned = next((k for k in OwnerKind if k.kind == kind), None)
        if owned is None:
            return
        if served:
            self._ever_served.add(owned)
        elif owned in self._ever_served:
            # Served once, refused now (RBAC taken away, the CRD going): its gangs wait for
            # their owners rather than be placed in parts; a CRD deleted takes its pods too.
            return
        if (owned in self._owner_kinds) == served:
            return
        if served:
            self._owner_kinds.add(owned)
        else:
            self._owner_kinds.discard(owned)
        self._everything = True
        self._changed()

    # Priority classes, queues, topologies and groups may change what any waiting gang can
    # do: a change of one makes the next snapshot whole (they change rarely). A Queue's
    # status, which we write, changes nothing of what it allows.

    def upsert_queue(self, queue: Queue, status: QueueStatus | None = None) -> None:
        self._everything |= self._queues.get(queue.name) != queue
        self._queue_statuses[queue.name] = status or QueueStatus()
        self._put(self._queues, queue.name, queue, kind=QUEUES)

    def remove_queue(self, name: str) -> None:
        self._unstamp(QUEUES, name)
        self._queue_statuses.pop(name, None)
        self._everything |= name in self._queues
        self._drop(self._queues, name)

    def census_inputs(self) -> tuple[list[Pod], dict[GangKey, PodGroup]]:
        """Our pods and the PodGroups by gang, copied, for ``model.holdings.census`` in a
        worker thread (the cache goes on changing on the event loop meanwhile)."""
        return list(self._ours.values()), self._podgroups_by_gang()

    def room(self) -> tuple[dict[str, Resources], dict[str, Resources], list[Resources]]:
        """For the fragmentation gauges (#26): the free and the allocatable room of the
        ready, schedulable nodes as of the last pass, and what each of our waiting pods
        asks for."""
        free: dict[str, Resources] = {}
        allocatable: dict[str, Resources] = {}
        for name, node in self._nodes.items():
            info = self._infos.get(name)
            if node.ready and not node.unschedulable and info is not None:
                free[name], allocatable[name] = info.free, node.allocatable
        waiting = [self._ours[uid].requests for uid in self._pending if uid in self._ours]
        return free, allocatable, waiting

    def tier_needs(self) -> list[tuple[str, int]]:
        """What the waiting gangs need free inside one unit of a level (their hard
        networkTopology), as the passes that last looked at them found it."""
        return [
            need
            for state in self._memory.values()
            if not (state.satisfied or state.timed_out)  # a timed-out gang is not tried
            for need in state.tier_needs
        ]

    def allocatable_total(self) -> dict[str, int]:
        """The allocatable room of the ready, schedulable nodes, summed."""
        total: dict[str, int] = {}
        for node in self._nodes.values():
            if node.ready and not node.unschedulable:
                for resource, amount in node.allocatable.items():
                    total[resource] = total.get(resource, 0) + amount
        return total

    def _queue_waiting(self, podgroups: Mapping[GangKey, PodGroup]) -> dict[str, Resources]:
        """What our pending pods ask for, by queue: what each queue's gangs wait for, parked
        ones included (a pass sees only the gangs it looks at)."""
        waiting: dict[str, dict[str, int]] = {}
        for uid in self._pending:
            pod = self._ours.get(uid)
            if pod is None or not pod.alive:
                continue
            wants = waiting.setdefault(queue_of_pod(pod, podgroups), {})
            for resource, amount in pod.requests.items():
                wants[resource] = wants.get(resource, 0) + amount
        return {queue: Resources(amounts) for queue, amounts in waiting.items()}

    def queue_statuses(self) -> dict[str, QueueStatus]:
        """The status each Queue shows now, as last read from the API server."""
        return dict(self._queue_statuses)

    @property
    def queues(self) -> dict[str, Queue] | None:
        """The Queues, None while the API server does not serve them."""
        return dict(self._queues) if self._queues_served else None

    def upsert_priority_class(self, priority_class: PriorityClass) -> None:
        self._everything |= self._classes.get(priority_class.name) != priority_class
        self._put(self._classes, priority_class.name, priority_class, kind="priorityclasses")

    def remove_priority_class(self, name: str) -> None:
        self._unstamp("priorityclasses", name)
        self._everything |= name in self._classes
        self._drop(self._classes, name)

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """A namespace's labels, for namespaceSelectors of pod (anti-)affinity terms. A new
        namespace has no pods yet, so only a change of an existing one's labels can help."""
        self.seen("namespaces", name)
        known = self._namespaces.get(name)
        self._namespaces[name] = dict(labels)
        if known is not None and known != labels:
            self._everything = True
            self._changed()

    def remove_namespace(self, name: str) -> None:
        self._unstamp("namespaces", name)
        self._namespaces.pop(name, None)  # its pods are gone or going: no pass for this

    # Storage changes rarely and may let any waiting pod go (a claim bound, a volume made):
    # a change makes the next snapshot whole.

    def upsert_claim(self, claim: Claim) -> None:
        key = f"{claim.namespace}/{claim.name}"
        self._everything |= self._claims.get(key) != claim
        self._put(self._claims, key, claim, kind="persistentvolumeclaims")

    def remove_claim(self, key: str) -> None:
        self._unstamp("persistentvolumeclaims", key)
        self._everything |= key in self._claims
        self._drop(self._claims, key)

    def upsert_volume(self, volume: Volume) -> None:
        self._everything |= self._volumes.get(volume.name) != volume
        self._put(self._volumes, volume.name, volume, kind="persistentvolumes")

    def remove_volume(self, name: str) -> None:
        self._unstamp("persistentvolumes", name)
        self._everything |= name in self._volumes
        self._drop(self._volumes, name)

    def upsert_storage_class(self, name: str, mode: str) -> None:
        self._everything |= self._modes.get(name) != mode
        self._put(self._modes, name, mode, kind="storageclasses")

    def remove_storage_class(self, name: str) -> None:
        self._unstamp("storageclasses", name)
        self._everything |= name in self._modes
        self._drop(self._modes, name)

    # Devices (#24). What can free a device or add one may let any waiting gang go: a claim
    # deallocated or deleted, a slice or a class changed. A claim allocated (our binds' own
    # writes, mostly) frees nothing.

    def upsert_slice(self, resource_slice: ResourceSlice) -> None:
        self._everything |= self._slices.get(resource_slice.name) != resource_slice
        self._put(self._slices, resource_slice.name, resource_slice, kind="resourceslices")

    def remove_slice(self, name: str) -> None:
        self._unstamp("resourceslices", name)
        self._drop(self._slices, name)

    def upsert_device_class(self, device_class: DeviceClass) -> None:
        self._everything |= self._device_classes.get(device_class.name) != device_class
        self._put(self._device_classes, device_class.name, device_class, kind="deviceclasses")

    def remove_device_class(self, name: str) -> None:
        self._unstamp("deviceclasses", name)
        self._everything |= name in self._device_classes
        self._drop(self._device_classes, name)

    def upsert_resource_claim(self, claim: ResourceClaim) -> None:
        key = claim.key
        old = self._resource_claims.get(key)
        self._everything |= old is None or (old.allocation is not None and claim.allocation is None)
        if claim.allocation is not None:
            self._assumed_claims.pop(key, None)  # what a bind wrote has landed (or another's)
        self.seen("resourceclaims", f"{key[0]}/{key[1]}")
        if old != claim:
            self._resource_claims[key] = claim
            self._changed()

    def remove_resource_claim(self, key: str) -> None:
        self._unstamp("resourceclaims", key)
        namespace, _, name = key.partition("/")
        old = self._resource_claims.pop((namespace, name), None)
        self._assumed_claims.pop((namespace, name), None)
        if old is not None:
            self._everything |= old.allocation is not None
            self._changed()

    def assume_claims(self, writes: Iterable[ClaimWrite]) -> None:
        """A group's claim writes are about to go: until a watch shows them, the next pass
        must see their devices taken (kube-scheduler's assume cache for claims, whose
        in-flight allocations also count their sharers)."""
        for write in writes:
            key = (write.namespace, write.name)
            if key in self._resource_claims:
                self._assumed_claims.setdefault(key, []).append(write)

    def forget_claims(self, writes: Iterable[ClaimWrite]) -> None:
        """These writes (and only these: another group may still be writing the same
        claim) did not land, or were undone: the claims are as the watch shows."""
        for write in writes:
            key = (write.namespace, write.name)
            pending = self._assumed_claims.get(key)
            if pending is None or not any(w is write for w in pending):
                continue
            pending[:] = [w for w in pending if w is not write]
            if not pending:
                del self._assumed_claims[key]
            self._everything = True
            self._changed()

    def _claim_as_written(self, key: tuple[str, str]) -> ResourceClaim | None:
        """A claim as the writes in flight will leave it."""
        claim = self._resource_claims.get(key)
        if claim is None:
            return None
        for write in self._assumed_claims.get(key, ()):
            consumers = tuple(
                Consumer("pods", ref.name, ref.uid)
                for ref in write.pods
                if not claim.reserved_for_pod(ref.uid)
            )
            claim = replace(
                claim,
                allocation=claim.allocation or write.allocation,
                reserved_for=claim.reserved_for + consumers,
            )
        return claim

    def leftover_claims(self) -> list[tuple[ResourceClaim, frozenset[str]]]:
        """Claims reserved for pods of ours that are not bound (nor being bound): what a
        group's writes left when the scheduler stopped between its claims and its binds, or
        when taking them back failed. With the uids of those pods."""
        found = []
        for claim in self._resource_claims.values():
            uids = frozenset(
                c.uid
                for c in claim.reserved_for
                if c.resource == "pods"
                and c.api_group == ""
                and (pod := self._ours.get(c.uid)) is not None
                and not pod.bound
                and c.uid not in self._assumed
            )
            if uids:
                found.append((claim, uids))
        return found

    def resource_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self._resource_claims.get((namespace, name))

    def upsert_budget(self, budget: DisruptionBudget) -> None:
        self._put(
            self._budgets, f"{budget.namespace}/{budget.name}", budget, kind="poddisruptionbudgets"
        )

    def remove_budget(self, key: str) -> None:
        self._unstamp("poddisruptionbudgets", key)
        self._drop(self._budgets, key)

    def upsert_topology(
        self, key: str, topology: Topology | None, errors: tuple[str, ...] = ()
    ) -> None:
        self._everything |= self._topologies.get(key) != (topology, errors)
        self._put(self._topologies, key, (topology, errors), kind="topologies")

    def remove_topology(self, key: str) -> None:
        self._everything |= key in self._topologies
        self._drop(self._topologies, key)

    def upsert_group(self, key: str, group: SakkaraGroup) -> None:
        self._everything |= self._groups.get(key) != group
        self._put(self._groups, key, group, kind="groups")

    def remove_group(self, key: str) -> None:
        self._everything |= key in self._groups
        self._drop(self._groups, key)

    @property
    def memory(self) -> dict[GangKey, GangState]:
        return self._memory

    def look_at_everything(self) -> None:
        self._everything = True
        self._changed()

    def remember(self, memory: dict[GangKey, GangState]) -> None:
        """Keep what the last pass decided about each gang, for the next pass. A gang whose
        memory the shell updated while the pass ran (a rejected bind) keeps that update; a
        gang without pods any more is forgotten. NonStrict holds the pass let go free room
        on their nodes as surely as a finished pod: those nodes count as changed."""
        held = {(ref, node) for s in self._memory.values() for ref, node in s.reservations.items()}
        still = {(ref, node) for s in memory.values() for ref, node in s.reservations.items()}
        for node in {node for _, node in held - still}:
            self._touch(node)
        kept = {key: self._memory[key] for key in self._updated if key in self._memory}
        self._memory = {key: state for key, state in memory.items() if key in self._members}
        self._memory.update(kept)
        self._updated.clear()
        self._index_parked()

    def _index_parked(self) -> None:
        self._parked_by_shape = {}
        self._parked_by_queue = {}
        self._due_at = {}
        self._stale_due = {
            key: state.stale.due for key, state in self._memory.items() if state.stale is not None
        }
        for key, state in self._memory.items():
            parked = state.parked
            if parked is None or state.reservations:
                continue  # a NonStrict holder must be in every pass: its holds are taken there
            self._due_at[key] = parked.due_at
            for shape in parked.shapes:
                self._parked_by_shape.setdefault(shape, set()).add(key)
            for queue, _ in parked.queues:
                self._parked_by_queue.setdefault(queue, set()).add(key)
        # A woken gang stays woken until a pass tried it (it may still be backing off).
        for key, parked_at in list(self._woken.items()):
            state = self._memory.get(key)
            if state is None or state.parked is None or state.parked.generation != parked_at:
                del self._woken[key]

    def _wake_parked(self, changed: list[NodeInfo]) -> None:
        """Nodes changed since the last snapshot that now have room for a parked gang's
        member wake that gang (room alone: the pass checks the rest)."""
        if not self._parked_by_shape:
            return
        for info in changed:
            if info.name not in self._nodes:
                continue
            free = info.free
            for shape, keys in self._parked_by_shape.items():
                if all(free.get(r, 0) >= a for r, a in shape.items()):
                    for key in keys:
                        state = self._memory.get(key)
                        if state is not None and state.parked is not None:
                            self._woken.setdefault(key, state.parked.generation)

    def _wake_queued(self) -> None:
        """Room freed in a queue wakes the gangs parked under it or under a queue above it
        (a parent's capability is its children's too); the pass checks whether it helps."""
        freed, self._freed_queues = self._freed_queues, set()
        if not freed or not self._parked_by_queue:
            return
        for queue in freed:
            at: str | None = queue
            seen: set[str] = set()
            while at is not None and at not in seen:
                seen.add(at)
                for key in self._parked_by_queue.get(at, ()):
                    state = self._memory.get(key)
                    if state is not None and state.parked is not None:
                        self._woken.setdefault(key, state.parked.generation)
                known = self._queues.get(at)
                at = known.parent if known is not None and known.parent else None

    def update_memory(self, key: GangKey, state: GangState) -> None:
        self._memory[key] = state
        self._updated.add(key)
        self._changed()

    # -- snapshot ---------------------------------------------------------------------------

    def _rebuild_infos(self) -> list[NodeInfo]:
        """Rebuild the infos of the nodes changed since the last snapshot; the rebuilt ones."""
        rebuilt = []
        self._requeue |= self._stale
        for name in self._stale:
            pods = self._on_node.get(name)
            if name not in self._nodes and not pods:
                self._infos.pop(name, None)
                continue
            info = self._infos[name] = NodeInfo.with_requested(
                name,
                self._nodes.get(name),
                tuple(pods.values()) if pods else (),
                Resources(self._requested.get(name, {})),
                generation=self._node_generation.get(name, 0),
            )
            rebuilt.append(info)
        self._stale.clear()
        return rebuilt

    def _active(self, now: float | None) -> set[GangKey]:
        """Gangs a pass must look at: changed ones, ones with a member waiting (unless parked
        and neither woken nor due at ``now``), and every gang of their GangGroups (both
        ways: named by them, or naming them)."""
        active = set(self._touched)
        waiting = set(self._pending_in)
        if now is not None:
            due = self._due_at
            waiting = {
                key for key in waiting if key not in due or key in self._woken or due[key] <= now
            }
        active.update(waiting)
        active.update(k for k, due in self._stale_due.items() if now is None or due <= now)
        todo = list(active)
        while todo:
            key = todo.pop()
            related: set[GangKey] = set(self._named_by.get(key, ()))
            owners: set[OwnerKey] = set()
            for pod in self._members.get(key, {}).values():
                related.update((pod.gang.groups or ()) if pod.gang else ())
                if pod.gang is not None and pod.gang.owner is not None:
                    owners.add(pod.gang.owner)
            for owner in owners:  # once per owner, not per member
                related.update(self._owned.get(owner, ()))
            podgroup = self._podgroup(key)
            if podgroup is not None:
                related.update(podgroup.groups or ())
            for other in related - active:
                active.add(other)
                todo.append(other)
        return active

    def snapshot(self, *, now: float | None = None, whole: bool = False) -> Snapshot:
        """Everything a pass needs, frozen: it may run in another thread while watch events
        go on changing the cache. Taking it starts a new round of "dirty" tracking: a change
        that lands while the pass runs asks for the next pass. With ``now``, parked gangs
        that nothing woke and that are not due are left out; ``whole``: every gang's pods,
        not only the active ones (for explain)."""
        # More than one topology ConfigMap: the first by name counts (the loader warns).
        topology, errors = (
            self._topologies[min(self._topologies)] if self._topologies else (None, ())
        )
        self._wake_parked(self._rebuild_infos())
        self._wake_queued()
        if whole or self._everything:
            self._everything = False
            pods = tuple(self._ours.values())
        else:
            members = self._members
            active = self._active(now)
            pods = tuple(p for key in active for p in members.get(key, {}).values())
        self._touched.clear()
        self.dirty = self.urgent = False
        self._updated.clear()
        podgroups = self._podgroups_by_gang()
        queues = self.queues
        if queues is None:
            self._forget_holdings()
        return Snapshot(
            nodes=dict(self._nodes),
            node_infos=dict(self._infos),
            generation=self._generation,
            in_flight=frozenset(self._assumed),
            pods=pods,
            podgroups=podgroups,
            priority_classes=dict(self._classes),
            memory=dict(self._memory),
            topology=topology,
            topology_errors=errors,
            groups={GangKey(g.namespace, g.name): g for _, g in sorted(self._groups.items())},
            namespace_labels=dict(self._namespaces),
            claims={(c.namespace, c.name): c for c in self._claims.values()},
            resource_slices=tuple(self._slices.values()),
            device_classes=dict(self._device_classes),
            resource_claims={
                **self._resource_claims,
                **{
                    key: claim
                    for key in self._assumed_claims
                    if (claim := self._claim_as_written(key))
                },
            },
            selectors=self.selectors,
            volumes=dict(self._volumes),
            binding_modes=dict(self._modes),
            budgets=tuple(b for _, b in sorted(self._budgets.items())),
            owners=self._owners_of_ours(),
            owner_kinds=frozenset(self._owner_kinds),
            queues=queues,
            queue_waiting=self._queue_waiting(podgroups)
            if bool(queues) and beyond_default(queues)
            else None,
            queue_usage=self.queue_usage,
            queue_holdings=self._queue_holdings(podgroups) if queues is not None else None,
        )

    def _forget_holdings(self) -> None:
        """No Queues served: no sums kept (summed afresh if they come back)."""
        self._holdings_live = False
        self._holdings.clear()
        self._requeue.clear()

    def _queue_holdings(self, podgroups: Mapping[GangKey, PodGroup]) -> QueueHoldings:
        """What the queues' pods hold, the parts of the nodes changed since the last
        snapshot worked out again (all of them the first time): O(changed nodes), where the
        walk a pass would do is O(bound pods)."""
        if not self._holdings_live:
            self._holdings_live = True
            self._holdings.clear()
            self._holdings_sum = HoldingsSum()
            self._holdings_queues = {}
            self._requeue = {*self._infos, *self._nodes}
        # A gang whose PodGroup came, went or names another queue: its bound members' nodes.
        queues = {key: (podgroup.queue, podgroup.api) for key, podgroup in podgroups.items()}
        before = self._holdings_queues
        for key in {*queues, *before}:
            if queues.get(key) != before.get(key):
                self._requeue.update(
                    p.node_name for p in self._members.get(key, {}).values() if p.node_name
                )
        self._holdings_queues = queues
        for name in self._requeue:
            old = self._holdings.pop(name, None)
            if old is not None:
                self._holdings_sum.add(old, sign=-1)
            info, node = self._infos.get(name), self._nodes.get(name)
            if info is None and node is None:
                continue
            part = NodeHoldings.on(info, node, ours=self._names, podgroups=podgroups)
            self._holdings[name] = part
            self._holdings_sum.add(part)
        self._requeue.clear()
        return self._holdings_sum.frozen(self._names)


def _owners_of_pod(pod: Pod) -> tuple[OwnerKey, ...]:
    """The owner objects whose changes are work for ``pod``'s gang: those that make it, and
    the Job that controls it, whose status counts the gang's completions (``Gang.completed``)."""
    if pod.gang is None:
        return ()
    owners = owners_of(pod.gang.owner, pod.gang.part)
    job = job_of(pod)
    return owners if job is None or job in owners else (*owners, job)
