"""The queue's unschedulable set: a gang that failed for want of room is parked, and tried
again only when a change could help it (kube-scheduler's queueing hints)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from scheduler.core.placing import Signature
from scheduler.core.session.outcomes import pending
from scheduler.model.gangs import Gang, PodGroup, PodGroupStatus
from scheduler.model.pods import Mode, Pod
from scheduler.model.resources import Resources
from scheduler.model.snapshot import Parked
from scheduler.model.status import Status

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session


_NO_STATUS = PodGroupStatus()


def _same(now: object, then: object) -> bool:
    """Whether an object a gang was tried with is unchanged, for the queue. Our own
    first-attempt mark on a pod is no change that could help it."""
    if now is then:
        return True
    if isinstance(now, Pod) and isinstance(then, Pod):
        # Nor the PodScheduled condition we wrote after the failure.
        return now == replace(
            then, first_attempt=now.first_attempt, scheduled_condition=now.scheduled_condition
        )
    return now == then


class Parking:
    """Who is worth trying again, and failures remembered within the pass."""

    def __init__(self, session: Session) -> None:
        self.session = session
        # Member shapes of Strict gangs that failed in this pass: within a pass capacity only
        # shrinks (a discarded Statement puts back exactly what it took), so a gang of the
        # same shapes fails too, without another scan. An eviction clears it.
        self.failed_shapes: dict[tuple, tuple[Status, list[str]]] = {}
        self._helps: dict[tuple, list[str]] = {}  # (generation, requests) -> roomy changed nodes
        self._changed: dict[int, list[str]] = {}  # generation -> nodes changed since

    def tried_with(self, gang: Gang) -> tuple[object, ...]:
        """What an attempt of ``gang`` depended on, besides the nodes: its members (the very
        objects: the cache replaces a pod when it changes), its PodGroup's spec (not its
        status, which we write ourselves, nor its generation: a CRD without a status
        subresource, as Volcano's, counts our status writes as new generations), and for a
        topology-placed gang the tree; and its size and group, which an owner states."""
        spec: PodGroup | None = (
            replace(gang.podgroup, status=_NO_STATUS, generation=0)
            if gang.podgroup is not None
            else None
        )
        tree = (self.session.snapshot.topology, gang.sakkara) if gang.topology_placed else ()
        # What its owner says (a gang from an owner: an owner that shrank may help it), and
        # its members that completed (a Job's count of them may rise after its pods went).
        sized = (gang.min_member, gang.total, gang.min_resources, len(gang.group), gang.completed)
        # Its queue and the queues above it: a capability raised may let it in.
        book = self.session.queues.book
        queues = (
            tuple(book.queues.get(q) for q in book.ancestors(book.name_of(gang.queue)))
            if book is not None
            else ()
        )
        # How many pods use each ReadWriteOncePod claim its members name: its user going,
        # on whatever node, may help it anywhere.
        exclusive = self.session.ledger.exclusive
        users = (
            tuple(
                exclusive.world.users.get(key, 0)
                for p in gang.members
                for key in exclusive.world.of_pod(p)
            )
            if exclusive is not None
            else ()
        )
        # Its members' PersistentVolumeClaims as they were: one bound, made, or no longer
        # asked for on a node (a choice released, a provisioner giving it back) may let it
        # go where it could not.
        stored = self.session.snapshot.claims
        claims = (
            tuple(stored.get((p.ref.namespace, name)) for p in gang.members for name in p.claims)
            if stored
            else ()
        )
        return (*gang.members, spec, tree, sized, queues, users, claims)

    def park(self, gang: Gang) -> None:
        """The gang failed for want of room: into the unschedulable set until a change could
        help it (only where the snapshot says which nodes changed, i.e. from the cache)."""
        if self.session.snapshot.node_infos is None:
            return
        outcome = self.session.outcomes[gang.key]
        if outcome.state.head_target:
            return  # a head gang holds its room every pass: it must stay in the snapshot
        if self._reclaim_may_help(gang) or self._kept_by_guarantees(gang):
            return
        flush = self.session.now + self.session.config.unschedulable_flush_seconds
        first = outcome.state.first_attempt
        deadline = first + gang.timeout_seconds if first is not None else flush
        # A Strict gang is looked at again when it becomes the head gang, too (a starvation
        # bound shorter than the flush interval would otherwise be met only at the flush).
        head = first + self.session.readiness.starvation_after(gang) if first is not None else flush
        if gang.mode is not Mode.STRICT or head <= self.session.now:
            head = flush
        outcome.state = replace(
            outcome.state,
            parked=Parked(
                generation=self.session.snapshot.generation,
                since=self.session.now,
                tried_with=self.tried_with(gang),
                shapes=frozenset(p.requests for p in pending(gang)),
                queues=self.session.queues.standing(gang),
                due_at=min(flush, deadline, head),
            ),
        )
        self.session.wake(min(flush, head))

    def _reclaim_may_help(self, gang: Gang) -> bool:
        """A gang that reclaim may serve is not parked: one whose queue lets its minimum in
        and stays within its fair share with it, while another queue holds room. Reclaim
        may help it as soon as the queues' standing moves (one growing past its share, the
        demand shifting), which no change to its own objects or to a node shows; it is
        tried again at its backoff instead. Reclaim asks every pending member to preempt."""
        book = self.session.queues.book
        todo = self.session.order.ordered(pending(gang))
        if book is None or not todo or not all(p.preempts for p in todo):
            return False
        if gang.podgroup is not None and not gang.podgroup.preempts:
            return False
        own = book.name_of(gang.queue)
        need = Resources.total(self.session.queues.amounts(p) for p in todo[: gang.need])
        if not book.below_fair(own, need) or self.session.queues.holds_back(gang):
            return False
        above = set(book.ancestors(own))
        return any(
            any(amount > 0 for amount in book.held.get(name, {}).values())
            for name in book.queues
            if name not in above and own not in book.ancestors(name)
        )

    def _kept_by_guarantees(self, gang: Gang) -> bool:
        """A gang held back by other queues' guarantees alone is not parked: the free room
        would take its minimum, the room kept for queues below their guarantee would not
        let it. Those queues filling up, or the free room growing where no member fits
        alone, is no change to it, its objects or a node that fits it; it is tried again at
        its backoff instead."""
        book = self.session.queues.book
        if book is None:
            return False
        kept = book.kept_for_others(book.name_of(gang.queue))
        if not kept:
            return False
        todo = self.session.order.ordered(pending(gang))
        need = Resources.total(p.requests for p in todo[: gang.need])
        free = self.session.queues.free_total()
        return any(
            0 < need.get(resource, 0) <= free.get(resource, 0) < need.get(resource, 0) + reserved
            for resource, (reserved, _) in kept.items()
        )

    def unpark(self, gang: Gang) -> None:
        outcome = self.session.outcomes[gang.key]
        if outcome.state.parked is not None:
            outcome.state = replace(outcome.state, parked=None)

    def worth_trying(self, gangs: list[Gang]) -> bool:
        """kube-scheduler's queueing hints, for a GangGroup: try it again only if one of its
        gangs was never parked, its own objects changed, the flush interval passed, a node
        changed since it failed such that one of its pending members now fits there, or
        devices were freed since and one of them asks devices."""
        flush = self.session.config.unschedulable_flush_seconds
        for gang in gangs:
            state = self.session.outcomes[gang.key].state
            parked = state.parked
            if parked is None or self.session.now >= parked.since + flush:
                return True
            if state.nominated and not self.session.readiness.victims_present(state):
                return True  # the room it preempted for is free (and held for it) now
            if self.session.queues.freed(parked.queues):
                return True  # its queue's limits may let it in now
            now_with = self.tried_with(gang)
            if len(now_with) != len(parked.tried_with) or any(
                not _same(a, b) for a, b in zip(now_with, parked.tried_with, strict=True)
            ):
                return True
            # Unchanged: remember the objects as they are now, so the next look is by identity.
            self.session.outcomes[gang.key].state = replace(
                state, parked=replace(parked, tried_with=now_with)
            )
            if self._a_change_fits(gang, since=parked.generation):
                return True
            if self.session.snapshot.devices_freed > parked.generation and any(
                self.session.devices.asks_devices(p) for p in pending(gang)
            ):
                return True  # devices freed since, on whatever node: a pass finds where
        for gang in gangs:
            parked = self.session.outcomes[gang.key].state.parked
            if parked is not None:
                self.session.wake(parked.since + flush)
        return False

    def _a_change_fits(self, gang: Gang, *, since: int) -> bool:
        changed = self._changed.get(since)
        if changed is None:
            infos = self.session.infos
            changed = self._changed[since] = [
                name
                for name in self.session.snapshot.nodes
                if (info := infos.get(name)) is None or info.generation > since
            ]
        if not changed:
            return False
        shapes: dict[Resources, Pod] = {}
        for pod in pending(gang):
            # Extended resources that devices may serve are no node's room to wait for:
            # leave them out (a pass then finds whether the devices are there).
            served = pod.extended and self.session.devices.asks_devices(pod)
            asked = pod.requests.without(r for a in pod.extended for r, _ in a.asks)
            shapes.setdefault(asked if served else pod.requests, pod)
        for requests, pod in shapes.items():
            # First by room alone (cheap, shared by every gang of the shape), then by the
            # static filters of the pod, only where some changed node has the room.
            roomy = self._helps.get((since, requests))
            if roomy is None:
                roomy = self._helps[(since, requests)] = [
                    name for name in changed if self.session.ledger.fits(name, requests)
                ]
            if roomy and any(name in self.session.finder.static_fit(pod) for name in roomy):
                return True
        return False

    def shape(self, gang: Gang) -> tuple | None:
        """The key under which a Strict gang's failure is remembered for this pass."""
        if (
            gang.mode is not Mode.STRICT
            or gang.topology_placed
            or gang.min_resources
            or gang.subgroup_minimums  # its members' labels say how it is placed
        ):
            return None
        todo = self.session.order.ordered(pending(gang))
        devices = self.session.devices
        if any(p.claims or devices.asks_devices(p) for p in todo) or not all(
            self.session.finder.inert(p, self.session.ledger) for p in todo
        ):
            # The other pods matter, or its claims (each its own): a gang of the same shapes
            # may fare otherwise.
            return None
        members = tuple((Signature.of(p), p.requests) for p in todo)
        # With queues, a gang of another queue may fare otherwise (its limits are its own);
        # one kept inside a unit of a tier fares otherwise than one that is not.
        queue = gang.queue if self.session.queues.book is not None else ""
        return (members, gang.need, queue, gang.network_topology)
