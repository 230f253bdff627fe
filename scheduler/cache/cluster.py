"""The scheduler's picture of the cluster, kept current by watch events, split along
kube-scheduler's seams: the node cache (``nodes.NodeCache``: NodeInfo, assume/forget), the
gang queue (``gangs.GangQueue``: our pods by gang, which wait, parking and wake indexes, and
whether a pass is due), plain per-kind stores (``kinds.Kind``), and what the watches
delivered (``deliveries.Deliveries``). ``ClusterCache`` folds each watch event into them and
takes the snapshot a pass decides on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.cache import kinds
from scheduler.cache.deliveries import Deliveries
from scheduler.cache.forecasts import Forecasts
from scheduler.cache.gangs import GangQueue
from scheduler.cache.kinds import Change, Kind
from scheduler.cache.nodes import NodeCache
from scheduler.cache.volumes import AssumedVolumes, names_exclusive, storage_of
from scheduler.model.composites import Hierarchies
from scheduler.model.decisions import ClaimWrite, VolumeWrite
from scheduler.model.devices import Consumer, DeviceClass, ResourceClaim
from scheduler.model.forecasts import Forecast
from scheduler.model.gangs import CompositePodGroup, Owner, PodGroup, queue_of_pod
from scheduler.model.nodes import Node
from scheduler.model.owners import OwnerKey, OwnerKind
from scheduler.model.pods import GangKey, Pod, PodGroupApi, PodRef, gang_key_of
from scheduler.model.queues import DEFAULT_QUEUE, Queue, QueueStatus, QueueUsage, beyond_default
from scheduler.model.resources import Resources
from scheduler.model.snapshot import GangState, Snapshot
from scheduler.model.topology import Topology
from scheduler.model.volumes import Claim, Volume

QUEUES = "queues"  # the kind Volcano's Queues are watched as


class ClusterCache:
    def __init__(
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
        self.nodes = NodeCache()
        self.gangs = GangQueue()
        self.deliveries = Deliveries()
        self._stores: dict[str, dict[str, Any]] = {kind.name: {} for kind in kinds.STORED}
        # PodGroups of every kind, by kind: the same name may be taken in several.
        self._podgroups: dict[PodGroupApi, dict[GangKey, PodGroup]] = {a: {} for a in PodGroupApi}
        # The owners that make gangs (Jobs, JobSets, …) by kind and "namespace/name"; the
        # kinds served and readable (all, until an informer finds one is not).
        self._owners: dict[OwnerKind, dict[str, Owner]] = {k: {} for k in OwnerKind}
        self._owner_kinds: set[OwnerKind] = set(OwnerKind)
        self._ever_served: set[OwnerKind] = set()
        # Volcano's Queues by name, and whether the API server serves them (until the
        # informer says so, not: then there are no queues).
        self._queues: dict[str, Queue] = {}
        self._queues_served = False
        self._queue_statuses: dict[str, QueueStatus] = {}  # as the API server shows them
        self._namespaces: dict[str, Mapping[str, str]] = {}  # name -> labels
        # Dynamic resource allocation: ResourceClaims by (namespace, name), and the claims
        # as binds in flight wrote them (until a watch shows them allocated, or the write
        # failed and is forgotten), per claim every group's write in flight: one group's
        # failure must not drop what another still writes.
        self._resource_claims: dict[tuple[str, str], ResourceClaim] = {}
        self._assumed_claims: dict[tuple[str, str], list[ClaimWrite]] = {}
        # Assumed writes that ended unsure, by id.
        self._unsure_claims: dict[int, ClaimWrite] = {}
        # Claims being made for pods' extended resources, by the pod's uid, until a watch
        # shows a claim made for that pod (or the write is forgotten): their devices are
        # taken meanwhile.
        self._made_claims: dict[str, ClaimWrite] = {}
        # Pods a pass chose to evict or move (uids), from when the pass is applied until
        # the watch shows them going (deleting, finished, gone) or their eviction is known
        # not to have been sent: the next pass may come before the watch does.
        self._leaving: set[str] = set()
        self._assumed_volumes = AssumedVolumes()
        self._devices_freed = 0  # the generation at which a claim last let its devices go
        # Time-based fair share: the queues' recent usage, as the last pass left it.
        self.queue_usage: QueueUsage | None = None
        # The latest forward play (the loop's forecaster), for the statuses of the passes.
        self.forecasts = Forecasts()
        # The tree the last pass with a gang stating a tier placed on (for the
        # stranded-by-topology gauge).
        self.placed_on: Topology | None = None

    # -- whether a pass is due (the gang queue's flags) -------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether a pass could decide anything new (cleared by each snapshot)."""
        return self.gangs.dirty

    @property
    def urgent(self) -> bool:
        """Whether the change could place or free anything (more than a recount)."""
        return self.gangs.urgent

    def _changed(self, *, urgent: bool = True) -> None:
        self.gangs.changed(urgent=urgent)

    @property
    def waiting(self) -> int:
        """How many of our pods are neither bound nor assumed."""
        return self.gangs.waiting

    # -- what the watches delivered ---------------------------------------------------------

    def seen(self, kind: str, key: str) -> None:
        self.deliveries.seen(kind, key)

    @property
    def delivered(self) -> int:
        """How many objects the watches have delivered so far (a point in their stream)."""
        return self.deliveries.delivered

    def _held(self, kind: str) -> Mapping[str, Any] | set[str]:
        """The keys of ``kind`` in the cache, as the re-list names them."""
        if kind in self._stores:
            return self._stores[kind]
        if kind == "pods":
            return self.nodes.pods
        if kind == "nodes":
            return self.nodes.nodes
        if kind == QUEUES:
            return self._queues
        if kind == "namespaces":
            return self._namespaces
        if kind == "resourceclaims":
            return {f"{ns}/{name}" for ns, name in self._resource_claims}
        for api in PodGroupApi:
            if kind == api.kind:
                return {str(key) for key in self._podgroups[api]}
        return next(self._owners[k] for k in OwnerKind if k.kind == kind)

    def vanished(self, kind: str, listed: set[str], *, since: int) -> list[str]:
        """Keys of ``kind`` in the cache that a LIST begun at ``since`` did not show and no
        watch delivered after it: objects deleted while no watch was there to say so."""
        return self.deliveries.vanished(kind, self._held(kind), listed, since=since)

    def stale(self, kind: str, key: str, *, since: int) -> bool:
        """Whether a LIST begun at ``since`` knows ``key`` better than the cache does."""
        return self.deliveries.stale(kind, key, since=since)

    def listing(self, kind: str) -> int:
        """A LIST of ``kind`` begins: the point in the watches' stream it begins at."""
        return self.deliveries.listing(kind)

    def listed(self, kind: str, *, since: int) -> None:
        """The LIST of ``kind`` begun at ``since`` is over (folded in, or failed)."""
        self.deliveries.listed(kind, since=since)

    def unseen(self, expected: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``expected`` no watch has delivered yet."""
        return self.deliveries.unseen(expected)

    def stop_tracking(self) -> None:
        self.deliveries.stop_tracking()

    @property
    def synced(self) -> bool:
        """Whether the first sync is over (watches delivered all a LIST showed)."""
        return self.deliveries.synced

    # -- the plain kinds --------------------------------------------------------------------

    def upsert(self, kind: Kind, obj: Any, *, key: str | None = None) -> None:
        """Keep ``obj`` of a plain kind (under ``key``, else the kind's key of it)."""
        if key is None:
            assert kind.key is not None, f"{kind.name} objects are kept under a given key"
            key = kind.key(obj)
        store = self._stores[kind.name]
        self.deliveries.seen(kind.name, key)
        if store.get(key) != obj:
            store[key] = obj
            self._mark(kind.change)

    def remove(self, kind: Kind, key: str) -> None:
        """Forget the object of a plain kind under ``key``."""
        if kind.relisted:
            self.deliveries.gone(kind.name, key)
        if self._stores[kind.name].pop(key, None) is not None:
            self._mark(kind.removal)

    def _mark(self, change: Change) -> None:
        if change is Change.EVERYTHING:
            self.gangs.everything = True
        self._changed()

    def stored(self, kind: Kind) -> Mapping[str, Any]:
        """The objects of a plain kind, by key (read only)."""
        return self._stores[kind.name]

    # -- pods and nodes ---------------------------------------------------------------------

    def _pod_changed(self, old: Pod | None, new: Pod | None) -> None:
        """Could this pod change let a pass decide something new, and is it more than a
        recount of a PodGroup's members? Called once the change is tracked."""
        # Capacity freed (a pod finished or went away) helps only if something waits.
        freed = old is not None and old.holds_resources and (new is None or not new.holds_resources)
        if freed and old.bound and old.scheduler_name in self._names:
            self._free_queue(old)  # before any return below
        if freed and old.claims and names_exclusive(old, self.claim):
            self.gangs.everything = True  # not room: a claim, on whatever node
        counts = False
        for pod in (old, new):
            if pod is None or pod.scheduler_name not in self._names:
                continue
            if not pod.bound:
                self._changed()  # a pending pod of ours: work
                return
            if self.gangs.gang_waits(pod):
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
        hold less, whatever node it was on, one already deleted included (else a queue's room
        freed by the pods of a deleted node would wake its parked gangs only at the flush,
        60 s on). Recorded even while nothing is parked: the pass in flight may be parking a
        gang on the room this pod held."""
        if not self._queues_served or not self._queues:
            return
        key = pod.gang.key if pod.gang is not None else None
        podgroup = self._podgroup(key) if key is not None else None
        queue = queue_of_pod(pod, {key: podgroup} if key is not None and podgroup else {})
        self.gangs.freed_queues.add(queue or DEFAULT_QUEUE)

    def _track(self, uid: str, pod: Pod | None) -> None:
        """Keep the set of our pending pods and the per-node accounting current (O(1) per
        change, not a scan). ``self.nodes.pods[uid]`` must still be the old pod when called."""
        old = self.nodes.pods.get(uid)
        if old is not None and old.holds_resources:
            self.nodes.unaccount(uid, old)
        if pod is not None and pod.holds_resources:
            self.nodes.account(uid, pod)
        ours = pod is not None and pod.scheduler_name in self._names
        was = self.gangs.ours.get(uid)
        if was is not None and (not ours or gang_key_of(was) != gang_key_of(pod)):
            for node in self.gangs.leave(uid, was):
                self.nodes.touch(node)
            self._forget_naming(gang_key_of(was))
        if ours:
            self.gangs.join(uid, pod)
        else:
            self.gangs.not_ours(uid)
        self.gangs.pend(uid, gang_key_of(pod) if ours and not pod.bound else None)

    def knows_pod(self, ref: PodRef) -> bool:
        """Whether the pod is one of ours the cache holds."""
        return ref.uid in self.gangs.ours

    def placed(self, ref: PodRef) -> bool:
        """Whether the pod is bound, or being bound, as far as the cache knows."""
        pod = self.nodes.pods.get(ref.uid)
        return pod is not None and bool(pod.node_name)

    def knows_gang(self, key: GangKey) -> bool:
        """Whether the gang has pods of ours or a PodGroup in the cache."""
        return key in self.gangs.members or self._podgroup(key) is not None

    def touch_gang(self, key: GangKey) -> None:
        """Have the next pass look at ``key`` again (a status write that failed, say)."""
        self.gangs.touch(key)

    def touch_pod(self, ref: PodRef) -> None:
        """Have the next pass look at the gang of ``ref`` again (its mark not written)."""
        pod = self.nodes.pods.get(ref.uid)
        if pod is not None:
            self.touch_gang(gang_key_of(pod))

    def _relevant(self, pod: Pod) -> bool:
        """Ours in any state, or anyone's that holds resources on a node."""
        return pod.scheduler_name in self._names or pod.holds_resources

    def upsert_pod(self, pod: Pod) -> None:
        uid = pod.ref.uid
        self.deliveries.seen("pods", uid)
        if uid in self._leaving and not pod.alive:
            self._leaving.discard(uid)  # seen going: the pod says it from here on
        confirmed = False
        if uid in self.nodes.assumed:
            if not pod.bound:  # not confirmed yet: keep counting it where we assumed it
                self.nodes.assumed[uid] = pod
                return
            del self.nodes.assumed[uid]
            confirmed = True
        old = self.nodes.pods.get(uid)
        if self._relevant(pod):
            # A confirmation just as assumed changes no field, but the bind is no longer in
            # flight: what a gang's waiting members wait for (see _pod_changed).
            if old != pod or confirmed:
                self._track(uid, pod)
                self.nodes.pods[uid] = pod
                self._pod_changed(old, pod)
        elif old is not None:
            self._track(uid, None)
            del self.nodes.pods[uid]
            self._pod_changed(old, None)

    def scheduler_name_of(self, uid: str) -> str | None:
        """The spec.schedulerName of our pod ``uid``, None if it is not ours (or gone)."""
        pod = self.gangs.ours.get(uid)
        return pod.scheduler_name if pod is not None else None

    def remove_pod(self, uid: str) -> None:
        self.deliveries.gone("pods", uid)
        self._leaving.discard(uid)
        self.nodes.assumed.pop(uid, None)
        made = self._made_claims.pop(uid, None)  # its claim goes with it (owned by it)
        if made is not None:
            self._unsure_claims.pop(id(made), None)
        self._track(uid, None)
        old = self.nodes.pods.pop(uid, None)
        if old is not None:
            self._pod_changed(old, None)

    def assume(self, ref: PodRef, node: str, *, by: str = "") -> None:
        """``ref`` is being bound to ``node`` by the scheduler named ``by``."""
        pod = self.nodes.pods.get(ref.uid)
        if pod is None or pod.bound:
            return
        self.nodes.assumed[ref.uid] = pod
        assumed = replace(pod, node_name=node, bound_by=by)
        self._track(ref.uid, assumed)  # no pass needed: the one that assumed it counted it
        self.nodes.pods[ref.uid] = assumed

    def assume_leaving(self, uids: Iterable[str]) -> None:
        """A pass's victims (and moved pods) are going, as far as the passes after it are
        concerned, before the watch shows them marked or deleted: no victim twice, and
        no gang running on members that are going. Their gangs are looked at again."""
        for uid in uids:
            pod = self.nodes.pods.get(uid)
            if pod is not None and pod.alive:
                self._leaving.add(uid)
                self._look_again(pod)

    def settle_leaving(self, uids: Iterable[str]) -> None:
        """These victims' evictions were not sent (a mark refused, the Lease lost) or found
        them gone: what the API server says of them counts again."""
        for uid in uids:
            if uid in self._leaving:
                self._leaving.discard(uid)
                if (pod := self.nodes.pods.get(uid)) is not None:
                    self._look_again(pod)

    def _look_again(self, pod: Pod) -> None:
        if pod.scheduler_name in self._names:
            self.touch_gang(gang_key_of(pod))
        else:
            self._changed()

    def forget(self, ref: PodRef) -> None:  # the pod is pending again: work
        original = self.nodes.assumed.pop(ref.uid, None)
        if original is not None:
            self._track(ref.uid, original)
            self.nodes.pods[ref.uid] = original
            self._changed()

    def upsert_node(self, node: Node) -> None:
        self.deliveries.seen("nodes", node.name)
        if self.nodes.upsert(node):
            self._changed()

    def remove_node(self, name: str) -> None:
        self.deliveries.gone("nodes", name)
        if self.nodes.remove(name):
            self._changed()

    def upsert_podgroup(self, podgroup: PodGroup) -> None:
        """A change of the spec (or the annotations folded into it) is work for a pass. A
        change of the status alone is not: the status is what passes write, and the watch
        brings back each write (a pass each). A pass reads it only for a gang it has no
        memory of (``_recovered_state``: the first pass after a start, which looks at
        everything); the next pass that looks at the gang sees the stored one."""
        store = self._podgroups[podgroup.api]
        old = store.get(podgroup.key)
        self.deliveries.seen(podgroup.api.kind, str(podgroup.key))
        if old == podgroup:
            return
        store[podgroup.key] = podgroup
        if old is not None and replace(old, status=podgroup.status) == podgroup:
            return
        self.gangs.touched.add(podgroup.key)
        for named in podgroup.groups or ():
            self.gangs.named_by.setdefault(named, set()).add(podgroup.key)
        self._changed()

    def remove_podgroup(self, key: GangKey, api: PodGroupApi = PodGroupApi.OURS) -> None:
        self.deliveries.gone(api.kind, str(key))
        self.gangs.touched.add(key)
        if self._podgroups[api].pop(key, None) is not None:
            self._forget_naming(key)
            self._changed()

    def _forget_naming(self, key: GangKey) -> None:
        """A gang with neither members nor a PodGroup names no group any more (else the
        groups named by every gang there ever was would be kept)."""
        if key not in self.gangs.members and self._podgroup(key) is None:
            self.gangs.unname(key)

    def _podgroup(self, key: GangKey) -> PodGroup | None:
        """The PodGroup of gang ``key``: of the kind its members name, when more than one
        kind has a PodGroup of that name."""
        found = [store[key] for store in self._podgroups.values() if key in store]
        if len(found) < 2:
            return found[0] if found else None
        members = self.gangs.members.get(key, {}).values()
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
        self.deliveries.seen(owner.key.kind.kind, key)
        if store.get(key) == owner:
            return
        store[key] = owner
        gangs = self.gangs.owned.get(owner.key)
        if gangs:  # only an owner of pods of ours is work (not every Job of the cluster)
            self.gangs.touched.update(gangs)
            self._changed()

    def remove_owner(self, kind: OwnerKind, key: str) -> None:
        self.deliveries.gone(kind.kind, key)
        gone = self._owners[kind].pop(key, None)
        gangs = self.gangs.owned.get(gone.key) if gone is not None else None
        if gangs:
            self.gangs.touched.update(gangs)
            self._changed()

    def _owners_of_ours(self) -> dict[OwnerKey, Owner]:
        """The owners that make gangs of our pods (and their JobSets' Jobs): a cluster's
        other Jobs are no pass's business."""
        found: dict[OwnerKey, Owner] = {}
        for key in self.gangs.owned:
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
                self.gangs.everything = True
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
        self.gangs.everything = True
        self._changed()

    # Priority classes, queues, topologies and groups may change what any waiting gang can
    # do: a change of one makes the next snapshot whole (they change rarely). A Queue's
    # status, which we write, changes nothing of what it allows.

    def upsert_queue(self, queue: Queue, status: QueueStatus | None = None) -> None:
        self._queue_statuses[queue.name] = status or QueueStatus()
        self.deliveries.seen(QUEUES, queue.name)
        if self._queues.get(queue.name) != queue:
            self._queues[queue.name] = queue
            self._mark(Change.EVERYTHING)

    def remove_queue(self, name: str) -> None:
        self.deliveries.gone(QUEUES, name)
        self._queue_statuses.pop(name, None)
        if self._queues.pop(name, None) is not None:
            self._mark(Change.EVERYTHING)

    def census_inputs(
        self,
    ) -> tuple[
        list[Pod],
        dict[GangKey, PodGroup],
        dict[tuple[str, str], ResourceClaim],
        dict[str, DeviceClass],
    ]:
        """Our pods, the PodGroups by gang, the ResourceClaims and the DeviceClasses,
        copied, for ``model.holdings.census`` in a worker thread (the cache goes on changing
        on the event loop meanwhile)."""
        return (
            list(self.gangs.ours.values()),
            self._podgroups_by_gang(),
            dict(self._resource_claims),
            dict(self.stored(kinds.DEVICE_CLASSES)),
        )

    def room(self) -> tuple[dict[str, Resources], dict[str, Resources], list[Resources]]:
        """For the fragmentation gauges: the free and the allocatable room of the
        ready, schedulable nodes as of the last pass, and what each of our waiting pods
        asks for."""
        free, allocatable = self.nodes.room()
        ours = self.gangs.ours
        waiting = [ours[uid].requests for uid in self.gangs.pending if uid in ours]
        return free, allocatable, waiting

    def tier_needs(self) -> list[tuple[str, int]]:
        """What the waiting gangs need free inside one unit of a level (their hard
        networkTopology), as the passes that last looked at them found it."""
        return self.gangs.tier_needs()

    def allocatable_total(self) -> dict[str, int]:
        """The allocatable room of the ready, schedulable nodes, summed."""
        return self.nodes.allocatable_total()

    def _queue_waiting(self, podgroups: Mapping[GangKey, PodGroup]) -> dict[str, Resources]:
        """What our pending pods ask for, by queue: what each queue's gangs wait for, parked
        ones included (a pass sees only the gangs it looks at)."""
        waiting: dict[str, dict[str, int]] = {}
        for uid in self.gangs.pending:
            pod = self.gangs.ours.get(uid)
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

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """A namespace's labels, for namespaceSelectors of pod (anti-)affinity terms and of
        queues. A new namespace has no pods yet, so only a change of an existing one's labels
        can help, or a new one's, whose pods may have come first, where a queue admits only
        some namespaces."""
        self.deliveries.seen("namespaces", name)
        known = self._namespaces.get(name)
        self._namespaces[name] = dict(labels)
        selective = known is None and any(
            q.namespace_selector is not None for q in self._queues.values()
        )
        if (known is not None and known != labels) or selective:
            self.gangs.everything = True
            self._changed()

    def remove_namespace(self, name: str) -> None:
        self.deliveries.gone("namespaces", name)
        self._namespaces.pop(name, None)  # its pods are gone or going: no pass for this

    def upsert_resource_claim(self, claim: ResourceClaim) -> None:
        key = claim.key
        old = self._resource_claims.get(key)
        freed = old is not None and old.allocation is not None and claim.allocation is None
        if freed:
            self._devices_freed = self.nodes.advance()
        self.gangs.everything |= old is None or freed
        if claim.extended and claim.allocation is not None and claim.owner_uid in self._made_claims:
            # Shown allocated: its devices are held by what the watch shows. Not before: a
            # claim is made first and allocated by a second write, and in between its
            # devices must stay taken.
            made = self._made_claims.pop(claim.owner_uid)
            self._unsure_claims.pop(id(made), None)
        if claim.allocation is not None:
            # What a bind wrote has landed (or another's).
            for write in self._assumed_claims.pop(key, ()):
                self._unsure_claims.pop(id(write), None)
        elif key in self._assumed_claims:
            # A write that ended unsure shows here as not landed: the claim is as it is.
            pending = self._assumed_claims[key]
            pending[:] = [w for w in pending if self._unsure_claims.pop(id(w), None) is None]
            if not pending:
                del self._assumed_claims[key]
        self.deliveries.seen("resourceclaims", f"{key[0]}/{key[1]}")
        if old != claim:
            self._resource_claims[key] = claim
            self._changed()

    def remove_resource_claim(self, key: str) -> None:
        self.deliveries.gone("resourceclaims", key)
        namespace, _, name = key.partition("/")
        old = self._resource_claims.pop((namespace, name), None)
        for write in self._assumed_claims.pop((namespace, name), ()):
            self._unsure_claims.pop(id(write), None)
        if old is not None and old.extended and old.owner_uid in self._made_claims:
            # The claim made for the pod is gone: nothing holds the devices planned for it.
            made = self._made_claims.pop(old.owner_uid)
            self._unsure_claims.pop(id(made), None)
        if old is not None:
            if old.allocation is not None:
                self._devices_freed = self.nodes.advance()
            self.gangs.everything |= old.allocation is not None
            self._changed()

    def assume_claims(self, writes: Iterable[ClaimWrite]) -> None:
        """A group's claim writes are about to go: until a watch shows them, the next pass
        must see their devices taken (kube-scheduler's assume cache for claims, whose
        in-flight allocations also count their sharers)."""
        for write in writes:
            key = (write.namespace, write.name)
            if write.made_here:
                self._made_claims[write.pods[0].uid] = write
            elif key in self._resource_claims:
                self._assumed_claims.setdefault(key, []).append(write)

    def forget_claims(self, writes: Iterable[ClaimWrite]) -> None:
        """These writes (and only these: another group may still be writing the same
        claim) did not land, or were undone: the claims are as the watch shows."""
        for write in writes:
            if write.made_here:
                if self._made_claims.get(write.pods[0].uid) is write:
                    del self._made_claims[write.pods[0].uid]
                    self.gangs.everything = True
                    self._changed()
                continue
            key = (write.namespace, write.name)
            pending = self._assumed_claims.get(key)
            if pending is None or not any(w is write for w in pending):
                continue
            pending[:] = [w for w in pending if w is not write]
            if not pending:
                del self._assumed_claims[key]
            self.gangs.everything = True
            self._changed()

    def unsure_claims(self, writes: Iterable[ClaimWrite]) -> None:
        """These writes ended without knowing whether they landed, and could not be taken
        back: their devices stay assumed taken until the watch shows the claim (allocated:
        they landed, or another's did; not: they did not)."""
        for write in writes:
            self._unsure_claims[id(write)] = write  # held: its id is not reused meanwhile

    def _claim_as_written(self, key: tuple[str, str]) -> ResourceClaim | None:
        """A claim as the writes in flight will leave it."""
        claim = self._resource_claims.get(key)
        if claim is None:
            return None
        for write in self._assumed_claims.get(key, ()):
            consumers = (
                *(g for g in write.groups if not claim.reserved_for_group(g)),
                *(
                    Consumer("pods", ref.name, ref.uid)
                    for ref in write.pods
                    if ref.uid not in write.grouped and not claim.reserved_for_pod(ref.uid)
                ),
            )
            claim = replace(
                claim,
                allocation=claim.allocation or write.allocation,
                reserved_for=claim.reserved_for + consumers,
            )
        return claim

    def leftover_claims(
        self,
    ) -> list[tuple[ResourceClaim, frozenset[str], tuple[Consumer, ...]]]:
        """Claims reserved for pods of ours that are not bound (nor being bound), or for an
        upstream PodGroup of ours none of whose members is: what a group's writes left when
        the scheduler stopped between its claims and its binds, or when taking them back
        failed. With the uids of those pods and those PodGroups."""
        found = []
        for claim in self._resource_claims.values():
            if claim.extended:
                continue  # ``leftover_made_claims``
            uids = frozenset(
                c.uid
                for c in claim.reserved_for
                if c.is_pod
                and (pod := self.gangs.ours.get(c.uid)) is not None
                and not pod.bound
                and c.uid not in self.nodes.assumed
            )
            groups = tuple(
                c
                for c in claim.reserved_for
                if c.is_podgroup and self._none_bound(GangKey(claim.namespace, c.name))
            )
            if uids or groups:
                found.append((claim, uids, groups))
        return found

    def _none_bound(self, key: GangKey) -> bool:
        """Whether the gang has members of ours and none of them is bound or being bound."""
        members = self.gangs.members.get(key, {})
        return bool(members) and not any(
            p.bound or p.ref.uid in self.nodes.assumed for p in members.values()
        )

    def leftover_made_claims(self) -> list[ResourceClaim]:
        """Claims made for the extended resources of pods of ours that are not bound (nor
        being bound): an attempt that did not bind, whose claim could not be deleted then.
        Each attempt makes its own, as kube-scheduler's does."""
        return [
            claim
            for claim in self._resource_claims.values()
            if claim.extended
            and (pod := self.gangs.ours.get(claim.owner_uid)) is not None
            and not pod.bound
            and claim.owner_uid not in self.nodes.assumed
        ]

    def resource_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self._resource_claims.get((namespace, name))

    @property
    def memory(self) -> dict[GangKey, GangState]:
        return self.gangs.memory

    def look_at_everything(self) -> None:
        self.gangs.look_at_everything()

    def remember(self, memory: dict[GangKey, GangState]) -> None:
        """Keep what the last pass decided about each gang (``GangQueue.remember``); the
        nodes where holds were let go count as changed."""
        for node in self.gangs.remember(memory):
            self.nodes.touch(node)

    def ours(self) -> tuple[Pod, ...]:
        """Every pod of ours, the parked gangs' too, without taking a snapshot (which would
        change what the next pass looks at)."""
        return tuple(self.gangs.ours.values())

    def keep_forecast(self, found: Forecast) -> None:
        """A forward play's result; the gangs whose estimate it changed are looked at
        again."""
        for key in self.forecasts.keep(found):
            self.touch_gang(key)

    def update_memory(self, key: GangKey, state: GangState) -> None:
        self.gangs.update(key, state)

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self, *, now: float | None = None, whole: bool = False) -> Snapshot:
        """Everything a pass needs, frozen: it may run in another thread while watch events
        go on changing the cache. Taking it starts a new round of "dirty" tracking: a change
        that lands while the pass runs asks for the next pass. With ``now``, parked gangs
        that nothing woke and that are not due are left out; ``whole``: every gang's pods,
        not only the active ones (for explain)."""
        # More than one topology ConfigMap: the first by name counts (the loader warns).
        topologies = self._stores[kinds.TOPOLOGIES.name]
        topology, errors = topologies[min(topologies)] if topologies else (None, ())
        nodes = self.nodes
        composites = self._composites()
        self.gangs.wake_on_nodes(nodes.rebuild(), known=nodes.nodes.__contains__)
        self.gangs.wake_on_queues(parent=self._parent_queue)
        if whole or self.gangs.everything:
            self.gangs.everything = False
            pods = tuple(self.gangs.ours.values())
        else:
            members = self.gangs.members
            # Built once, read only if a gang has a parent.
            hierarchies = Hierarchies(
                podgroups=self._podgroups[PodGroupApi.WORKLOAD], composites=composites
            )
            active = self.gangs.active(
                now, groups_of=lambda key: self._groups_named(key, hierarchies)
            )
            pods = tuple(p for key in active for p in members.get(key, {}).values())
        self.gangs.taken()
        podgroups = self._podgroups_by_gang()
        queues = self.queues
        if queues is None:
            nodes.forget_holdings()
        stored = self._stores
        claims, volumes = self._storage()
        return Snapshot(
            nodes=dict(self.nodes.nodes),
            node_infos=dict(self.nodes.infos),
            generation=self.nodes.generation,
            devices_freed=self._devices_freed,
            in_flight=frozenset(self.nodes.assumed),
            leaving=frozenset(self._leaving),
            pods=pods,
            podgroups=podgroups,
            priority_classes=dict(stored[kinds.PRIORITY_CLASSES.name]),
            composites=composites,
            memory=dict(self.gangs.memory),
            topology=topology,
            topology_errors=errors,
            groups={
                GangKey(g.namespace, g.name): g
                for _, g in sorted(stored[kinds.GROUPS.name].items())
            },
            namespace_labels=dict(self._namespaces),
            claims=claims,
            resource_slices=tuple(stored[kinds.RESOURCE_SLICES.name].values()),
            device_classes=dict(stored[kinds.DEVICE_CLASSES.name]),
            resource_claims={
                **self._resource_claims,
                **{
                    key: claim
                    for key in self._assumed_claims
                    if (claim := self._claim_as_written(key))
                },
                **{(c.namespace, c.name): c for c in map(_as_made, self._made_claims.values())},
            },
            selectors=self.selectors,
            volumes=volumes,
            **storage_of(stored),
            budgets=tuple(b for _, b in sorted(stored[kinds.DISRUPTION_BUDGETS.name].items())),
            owners=self._owners_of_ours(),
            owner_kinds=frozenset(self._owner_kinds),
            queues=queues,
            queue_waiting=self._queue_waiting(podgroups)
            if bool(queues) and beyond_default(queues)
            else None,
            queue_usage=self.queue_usage,
            forecast=self.forecasts.latest,
            queue_holdings=nodes.queue_holdings(
                podgroups, ours=self._names, members=self._members_of
            )
            if queues is not None
            else None,
        )

    def _storage(self) -> tuple[dict[tuple[str, str], Claim], dict[str, Volume]]:
        stored = self._stores
        claims = {
            (c.namespace, c.name): c for c in stored[kinds.PERSISTENT_VOLUME_CLAIMS.name].values()
        }
        volumes = dict(stored[kinds.PERSISTENT_VOLUMES.name])
        if not self._assumed_volumes:
            return claims, volumes
        return self._assumed_volumes.overlay(claims, volumes)

    def assume_volumes(self, writes: Iterable[VolumeWrite]) -> None:
        """A group's volume choices are about to be written: the next passes see them made
        until the watch shows them (``cache.volumes``)."""
        self._assumed_volumes.assume(writes)

    def forget_volumes(self, writes: Iterable[VolumeWrite]) -> None:
        """These volume writes did not land, or were taken back: the claims and volumes are
        as the watch shows. Whatever waited for them may fare otherwise now."""
        self._assumed_volumes.forget(writes)
        self.gangs.everything = True
        self._changed()

    def claim(self, namespace: str, name: str) -> Claim | None:
        """A PersistentVolumeClaim as the watch shows it."""
        return self._stores[kinds.PERSISTENT_VOLUME_CLAIMS.name].get(f"{namespace}/{name}")

    def volume(self, name: str) -> Volume | None:
        """A PersistentVolume as the watch shows it."""
        return self._stores[kinds.PERSISTENT_VOLUMES.name].get(name)

    def _parent_queue(self, name: str) -> str | None:
        known = self._queues.get(name)
        return known.parent if known is not None and known.parent else None

    def _groups_named(self, key: GangKey, hierarchies: Hierarchies) -> tuple[GangKey, ...]:
        """The gangs ``key``'s PodGroup places it with: those its GangGroup names, or every
        PodGroup under the root of its CompositePodGroup hierarchy (``hierarchies``: the
        index a snapshot builds once)."""
        podgroup = self._podgroup(key)
        if podgroup is None:
            return ()
        if podgroup.parent:
            found = hierarchies.of(key)
            return found.quorum.gangs() if found.quorum is not None else ()
        return tuple(podgroup.groups or ())

    def _composites(self) -> dict[GangKey, CompositePodGroup]:
        stored = self._stores[kinds.COMPOSITE_PODGROUPS.name]
        return {c.key: c for c in stored.values()}

    def _members_of(self, key: GangKey) -> Iterable[Pod]:
        return self.gangs.members.get(key, {}).values()


def _as_made(write: ClaimWrite) -> ResourceClaim:
    """A claim being made for a pod's extended resources, as it will be once written."""
    pod = write.pods[0]
    return ResourceClaim(
        namespace=write.namespace,
        name=write.name,
        requests=write.requests,
        allocation=write.allocation,
        reserved_for=(Consumer("pods", pod.name, pod.uid),),
        owner_uid=pod.uid,
        extended=True,
    )
