"""The queues of a pass: the book of what each holds and its fair share, the room a turn may
take in each, and what preemption counts or frees in them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from scheduler.core.placing import Ledger
from scheduler.core.queues import QueueBook, QueueRoom, decayed_usage
from scheduler.core.session.outcomes import pending
from scheduler.model.devices import DEVICE_CLASS_RESOURCE, pod_devices
from scheduler.model.gangs import Gang, queue_of_pod
from scheduler.model.holdings import holdings
from scheduler.model.nodes import Node
from scheduler.model.pods import Pod, PodRef
from scheduler.model.queues import DEFAULT_QUEUE, Queue, QueueUsage, beyond_default
from scheduler.model.resources import Resources

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session


def _queues_matter(queues: Mapping[str, Queue], gangs: Iterable[Gang]) -> bool:
    """Whether queues can change anything in this pass: some queue besides a default without
    limits exists, or a gang names one. Else the pass goes as without queues, and does not
    count what every queue holds (a walk over every bound pod)."""
    return beyond_default(queues) or any(g.queue not in ("", DEFAULT_QUEUE) for g in gangs)


class Queues:
    """The queues of one pass; ``book`` is None where none matter."""

    def __init__(self, session: Session) -> None:
        self.session = session
        # Pods counted in their queue's book as nominated (not to be counted when they bind).
        self.counted_refs: set[PodRef] = set()
        # Time-based fair share: the queues' recent usage as this pass updated it (the
        # snapshot's, unchanged, when the pass built no queue book).
        self.usage: QueueUsage | None = session.snapshot.queue_usage
        self._amounts: dict[PodRef, Resources] = {}

    def amounts(self, pod: Pod) -> Resources:
        """What ``pod`` counts for in its queue: its requests and its devices
        (``pod_devices``). A class's devices asked by its implicit name count by the name
        the class is counted by (its ``extendedResourceName``, if it has one), as they will
        once the claim made for them holds them."""
        implicit = pod.extended and any(
            r.startswith(DEVICE_CLASS_RESOURCE) for a in pod.extended for r, _ in a.asks
        )
        if not pod.resource_claims and not implicit:
            return pod.requests
        found = self._amounts.get(pod.ref)
        if found is None:
            world = self.session.devices
            requests = world.counted(pod.requests) if implicit else pod.requests
            devices = pod_devices(pod, world.claims, world.classes, users=self._users)
            found = self._amounts[pod.ref] = requests + Resources(devices)
        return found

    @cached_property
    def _users(self) -> dict[tuple[str, str], int]:
        """How many of the pass's pods name each ResourceClaim: a claim not reserved yet is
        one pod's only while no other names it."""
        users: dict[tuple[str, str], int] = {}
        for pod in self.session.snapshot.pods:
            for key in {(pod.ref.namespace, e.claim) for e in pod.resource_claims if e.claim}:
                users[key] = users.get(key, 0) + 1
        return users

    @cached_property
    def book(self) -> QueueBook | None:
        """The queues of this pass; None where the API server serves none (no queues: every
        gang competes on priority and age alone)."""
        queues = self.session.snapshot.queues
        if queues is None or not _queues_matter(queues, self.session.gangs.values()):
            return None
        return self.book_of(queues)

    def book_of(self, queues: Mapping[str, Queue]) -> QueueBook:
        """The book of ``queues`` on this snapshot: what each holds (our bound pods, by
        queue, those leaving included, and the room nominated to its preemptors and
        reclaimers, which they will bind), what of it is leaving, what each waits for, and
        the room the cluster has for them all."""
        names = self.session.config.scheduler_names
        given = self.session.snapshot.queue_holdings  # summed by the cache as nodes changed
        if given is None or given.ours != names:
            given = holdings(
                self.session.snapshot.nodes,
                self.session.infos,
                ours=names,
                podgroups=self.session.snapshot.podgroups,
            )
        usage = {queue: dict(amounts) for queue, amounts in given.held.items()}
        leaving = {queue: dict(amounts) for queue, amounts in given.leaving.items()}
        self._count_devices(usage, leaving)
        total = dict(given.room)
        waiting = self.session.snapshot.queue_waiting
        if waiting is None:  # not counted by a cache: the pending members of this pass
            waiting = {}
            for gang in self.session.gangs.values():
                for pod in pending(gang):
                    waiting[gang.queue] = waiting.get(gang.queue, Resources()) + self.amounts(pod)
        elif self.session.devices.claims:
            # The cache counts requests; the devices the pass's pending members ask are
            # added here (claims change apart from pods: the cache does not sum them).
            waiting = dict(waiting)
            for gang in self.session.gangs.values():
                for pod in pending(gang):
                    if pod.resource_claims and (devices := self.amounts(pod) - pod.requests):
                        waiting[gang.queue] = waiting.get(gang.queue, Resources()) + devices
        wanted = {(name or DEFAULT_QUEUE): amounts for name, amounts in waiting.items()}
        # The cluster's devices counted as a resource a queue holds, wants or states a
        # limit of (beside what nodes publish of it): its fair shares of them, as of cpu.
        stated = {
            resource
            for queue in queues.values()
            for limits in (queue.capability, queue.deserved, queue.guarantee)
            for resource in (limits or {})
        }
        for resource in {*stated, *(r for a in (*usage.values(), *wanted.values()) for r in a)}:
            if self.session.devices.served(resource):
                total[resource] = total.get(resource, 0) + self.session.devices.count_free(
                    resource, nodes=self._usable(), held=lambda device: False
                )
        for key, outcome in self.session.outcomes.items():
            nominated = outcome.state.nominated
            if not nominated:
                continue
            gang = self.session.gangs[key]
            into = usage.setdefault(gang.queue or DEFAULT_QUEUE, {})
            for pod in pending(gang):
                if pod.ref in nominated:
                    self.counted_refs.add(pod.ref)
                    for resource, amount in self.amounts(pod).items():
                        into[resource] = into.get(resource, 0) + amount
        past = None
        half_life = self.session.config.fair_share_half_life_seconds
        if half_life is not None:
            self.usage = decayed_usage(
                self.session.snapshot.queue_usage, usage, now=self.session.now, half_life=half_life
            )
            past = self.usage.average
        return QueueBook(
            queues,
            usage=usage,
            total=total,
            waiting=wanted,
            leaving=leaving,
            past=past,
            namespaces=self.session.snapshot.namespace_labels,
        )

    def _count_devices(
        self, usage: dict[str, dict[str, int]], leaving: dict[str, dict[str, int]]
    ) -> None:
        """Add the devices our bound pods hold to their queues (the cache's sums count
        requests only). A walk over the bound pods, only where some claim is allocated."""
        if not any(c.allocation is not None for c in self.session.devices.claims.values()):
            return
        names = self.session.config.scheduler_names
        for info in self.session.infos.values():
            for pod in info.pods:
                if not pod.resource_claims or pod.scheduler_name not in names:
                    continue
                if not pod.holds_resources:
                    continue
                devices = self.amounts(pod) - pod.requests
                if not devices:
                    continue
                queue = self.of(pod)
                into = usage.setdefault(queue, {})
                for resource, amount in devices.items():
                    into[resource] = into.get(resource, 0) + amount
                if pod.deleting:
                    going = leaving.setdefault(queue, {})
                    for resource, amount in devices.items():
                        going[resource] = going.get(resource, 0) + amount

    def of(self, pod: Pod) -> str:
        """The queue a pod of ours counts against, by name ("default" for none)."""
        return queue_of_pod(pod, self.session.snapshot.podgroups) or DEFAULT_QUEUE

    def holds_back(self, gang: Gang) -> bool:
        """Whether the gang's queue would not let its minimum in now: Closed, unknown or
        invalid, or over a capability (its own or an ancestor's) with what the queues hold
        as the pass leaves them; Volcano's enqueue action keeps such a PodGroup Pending."""
        book = self.book
        if book is None:
            return False
        if book.problem(gang.queue, namespace=gang.key.namespace) is not None:
            return True
        room = self.room()
        minimum = Resources.total(
            self.amounts(p) for p in self.session.order.ordered(pending(gang))[: gang.need]
        )
        return room is not None and bool(room.refuse(gang.queue, minimum, guarantees=False))

    def room(self, ledger: Ledger | None = None) -> QueueRoom | None:
        """The room a turn may take in each queue, on ``ledger`` (a trial's, with its
        victims gone; else the pass's); None without queues."""
        book = self.book
        if book is None:
            return None
        return QueueRoom(book, free=lambda: self.free_total(ledger), amounts=self.amounts)

    def free_total(self, ledger: Ledger | None = None) -> dict[str, int]:
        """The free room of the ready, schedulable nodes, summed."""
        ledger = ledger if ledger is not None else self.session.ledger
        free: dict[str, int] = {}
        for name, node in self.session.snapshot.nodes.items():
            if node.ready and not node.unschedulable:
                for resource, amount in ledger.free(name).items():
                    free[resource] = free.get(resource, 0) + max(amount, 0)
        book = self.book
        devices = self.session.devices
        guaranteed = {
            resource
            for queue in (book.queues.values() if book is not None else ())
            for resource in (queue.guarantee or {})
            if devices.served(resource)
        }
        for resource in guaranteed:
            free[resource] = free.get(resource, 0) + devices.count_free(
                resource, nodes=self._usable(), held=ledger.holds
            )
        return free

    def _usable(self) -> list[Node]:
        """The ready, schedulable nodes: those whose room the queues share."""
        return [n for n in self.session.snapshot.nodes.values() if n.ready and not n.unschedulable]

    def count_nominated(self, gang: Gang, refs: Iterable[PodRef]) -> None:
        """A preemption or a reclaim nominated these members of ``gang``: count them in its
        queue now (later turns of this pass see the room as taken), and not again when they
        bind."""
        book = self.book
        if book is None:
            return
        members = {p.ref: p for p in gang.members}
        for ref in refs:
            if ref in members and ref not in self.counted_refs:
                self._count_in(book, gang.queue, self.amounts(members[ref]), ref=ref)

    def _count_in(
        self, book: QueueBook, queue: str, amounts: Resources, *, ref: PodRef | None = None
    ) -> None:
        """Count ``amounts`` against ``queue`` in the book (``ref``: a nominated member, not
        to be counted again when it binds); undone with the open turn."""
        book.take(queue, amounts)
        if ref is not None:
            self.counted_refs.add(ref)
        turn = self.session.open
        if turn is not None:

            def undo() -> None:
                book.take(queue, {r: -a for r, a in amounts.items()})
                if ref is not None:
                    self.counted_refs.discard(ref)

            turn.changed(undo=undo)

    def leave(self, queue: str, amounts: Resources) -> None:
        """Count what an eviction of this turn frees in ``queue`` as leaving."""
        book = self.book
        if book is None:
            return
        book.leave(queue, amounts)
        if self.session.open is not None:
            self.session.open.changed(
                undo=lambda: book.leave(queue, {r: -a for r, a in amounts.items()})
            )

    def standing(self, gang: Gang) -> tuple[tuple[str, Resources], ...]:
        """What the gang's queue and those above it that have a capability hold now,
        nearest first: room freed under a capability may let the gang in; in a queue without
        one, a pod ending frees node room, which the node's change announces (none without
        queues)."""
        book = self.book
        if book is None:
            return ()
        return tuple(
            (name, Resources(book.held.get(name, {})))
            for name in book.ancestors(book.name_of(gang.queue))
            if (known := book.queues.get(name)) is not None and known.capability
        )

    def freed(self, then: tuple[tuple[str, Resources], ...]) -> bool:
        """Whether one of the queues a gang was parked under holds less of something than
        it did then: room its limits may now let it have."""
        book = self.book
        if book is None or not then:
            return False
        for name, held in then:
            now = book.held.get(name, {})
            if any(now.get(resource, 0) < amount for resource, amount in held.items()):
                return True
        return False
