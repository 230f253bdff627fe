"""The order GangGroups are taken in: a gang cut short first, then by queue, priority, age and
name; and the order of a gang's members."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

from scheduler.core.gangs import gang_groups, priority_of, queue_key
from scheduler.core.session.outcomes import pending
from scheduler.model.gangs import Gang
from scheduler.model.pods import GangKey, Pod

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session


class Order:
    """The queue order of one pass."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def units(self) -> Iterator[tuple[GangKey, ...]]:
        """The GangGroups in queue order: priority, then age, then name (Koordinator's); but
        first any group with a gang cut short (satisfied with fewer than min_member members
        bound: the scheduler died between its binds), whose remaining members had room when
        it was decided, so that they get it back before anyone else takes it.

        With queues, the next group comes from the queue furthest below its fair share
        (``QueueBook.order``) as the shares stand when it is asked for, in that order inside
        the queue: what each turn commits counts against its queue as it commits, so the
        next group is chosen after it."""
        classes = self.session.snapshot.priority_classes
        queue_of: dict[tuple[GangKey, ...], str] = {}
        cut: set[tuple[GangKey, ...]] = set()

        def unit_order(unit: tuple[GangKey, ...]) -> tuple:
            present = [self.session.gangs[k] for k in unit if k in self.session.gangs]
            if any(self.cut_short(g) for g in present):
                cut.add(unit)
            key, queue_of[unit] = min((queue_key(g, classes), g.queue) for g in present)
            return (unit not in cut, key)

        ordered = sorted(gang_groups(self.session.gangs), key=unit_order)
        book = self.session.queues.book
        if book is None:
            yield from ordered
            return
        # A group is in the queue of its first gang in queue order.
        by_queue: dict[str, list[tuple[GangKey, ...]]] = {}
        for unit in ordered:
            if unit in cut:
                yield unit  # cut short: first, whatever its queue
                continue
            by_queue.setdefault(book.name_of(queue_of[unit]), []).append(unit)
        for units in by_queue.values():
            units.reverse()  # popped from the end: the first in queue order last
        heap = [(book.order(name), name) for name in by_queue]
        heapq.heapify(heap)
        while heap:
            _, name = heapq.heappop(heap)
            units = by_queue[name]
            yield units.pop()
            if units:
                heapq.heappush(heap, (book.order(name), name))

    def cut_short(self, gang: Gang) -> bool:
        """Satisfied, yet with fewer than min_member members bound and alive, and some
        waiting: an all-or-nothing commit of ours that was interrupted. A gang satisfied by
        another binder's bind alone (no member carries our bound-by mark) had no room
        decided for it: it goes in its turn, or it would take the room of one that had."""
        if not self.session.outcomes[gang.key].state.satisfied:
            return False
        bound = [p for p in gang.members if p.bound and p.alive]
        ours = self.session.config.scheduler_names
        return (
            len(bound) + gang.completed < gang.min_member
            and bool(pending(gang))
            and any(p.bound_by in ours for p in bound)
        )

    def ordered(self, pods: list[Pod]) -> list[Pod]:
        """Members in the order they are placed: priority, then age, then name."""
        classes = self.session.snapshot.priority_classes
        return sorted(pods, key=lambda p: (-priority_of(p, classes), p.created, p.ref))
