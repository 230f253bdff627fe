"""The gang queue: our pods by gang, which of them wait, and which gangs the next pass must
look at (kube-scheduler's scheduling queue, for gangs).

A snapshot holds the pods of the *active* gangs only: those with a member waiting to be
placed, and those whose pods or PodGroup changed since the last snapshot, with the rest of
their GangGroups. A settled gang has nothing to decide until one of its objects changes; its
memory is carried over as it is. A gang the core *parked* (it failed for want of room) is
left out too, until a node changes so that one of its members' requests fit the node's free
room, its queue frees room, its own objects change, or its flush or timeout falls due: the
core makes the exact check (static filters too), the queue only the cheap one that keeps a
thousand waiting gangs out of every pass.

The flags say whether a pass is due: ``dirty`` (a change a pass could act on), ``urgent``
(more than a recount of a PodGroup's members) and ``everything`` (a change that may help any
gang: the next snapshot is whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from scheduler.model.nodes import NodeInfo
from scheduler.model.owners import OwnerKey, owners_of
from scheduler.model.pods import GangKey, Pod, PodRef, gang_key_of, job_of
from scheduler.model.resources import Resources
from scheduler.model.snapshot import GangState


class GangQueue:
    def __init__(self) -> None:
        self.ours: dict[str, Pod] = {}  # our pods, in any state, by uid
        # Our pods by gang; gangs changed since the last snapshot; who names whom in groups.
        self.members: dict[GangKey, dict[str, Pod]] = {}
        self.touched: set[GangKey] = set()
        self.named_by: dict[GangKey, set[GangKey]] = {}
        # The gangs each owner makes, from its pods (a JobSet's replicas are one GangGroup),
        # and the same, the other way.
        self.owned: dict[OwnerKey, set[GangKey]] = {}
        self._owners_of_gang: dict[GangKey, set[OwnerKey]] = {}
        # Our pods not bound (nor assumed): their gangs by uid, and how many per gang.
        self.pending: dict[str, GangKey] = {}
        self.pending_in: dict[GangKey, int] = {}
        self.memory: dict[GangKey, GangState] = {}
        self._updated: set[GangKey] = set()  # memory the shell changed since the last snapshot
        # Parked gangs (from the memory): by the requests of their pending members, when they
        # fall due, and those woken by a change (with the parking they were woken from).
        self._parked_by_shape: dict[Resources, set[GangKey]] = {}
        self._due_at: dict[GangKey, float] = {}
        # Running gangs below their minimum: when the rest is to be evicted; such a gang has
        # nothing pending, so nothing else puts it in the pass that is due then.
        self._stale_due: dict[GangKey, float] = {}
        self._woken: dict[GangKey, int] = {}
        # Running pods of ours a scheduler marked for eviction, by gang: every pass looks at
        # their gangs (finish-evictions), though nothing in them waits or changes.
        self._marked: dict[GangKey, set[str]] = {}
        # With queues: parked gangs by each queue they were parked under, and the queues a
        # bound pod of ours left since the last snapshot (room freed in them).
        self._parked_by_queue: dict[str, set[GangKey]] = {}
        self.freed_queues: set[str] = set()
        # Whether a pass could decide anything new: set by changes that can (a pending pod of
        # ours, a node, a PodGroup or its members, freed capacity, a bind confirmed while its
        # gang has members waiting), cleared by each snapshot. Other bind confirmations and
        # status updates of bound pods without a PodGroup cannot.
        self.dirty = True
        # Whether the change could place or free anything, as opposed to a change of a bound
        # member of a PodGroup gang with nobody of its gang (or GangGroup) waiting: its bind
        # confirmed, it started running, it finished or went while nothing waits. A pass
        # would only recount the gang's status, and status writes wait behind binds anyway.
        # The loop runs a pass for those at most once a second: a backlog of 625 gangs ran
        # ~200 such passes between its binds, each over every gang whose member changed.
        self.urgent = True
        # Set when a change the cache cannot attribute (a topology or group ConfigMap, a
        # PriorityClass, a pass that failed) may help any gang: the next snapshot is whole.
        self.everything = True

    def changed(self, *, urgent: bool = True) -> None:
        """A change a pass could act on (``urgent``: more than a recount)."""
        self.dirty = True
        self.urgent = self.urgent or urgent

    def look_at_everything(self) -> None:
        self.everything = True
        self.changed()

    # -- members ----------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """How many of our pods are neither bound nor assumed."""
        return len(self.pending)

    def gang_waits(self, pod: Pod) -> bool:
        """Whether a pod of the gang of ``pod``, or of a gang of its GangGroup, is neither
        bound nor assumed."""
        if not self.pending_in:
            return False
        key = gang_key_of(pod)
        if key in self.pending_in:
            return True
        related = (*(pod.gang.groups or ()), *self.named_by.get(key, ())) if pod.gang else ()
        if pod.gang is not None and pod.gang.owner is not None:
            related = (*related, *self.owned.get(pod.gang.owner, ()))
        return any(k in self.pending_in for k in related)

    def pend(self, uid: str, key: GangKey | None) -> None:
        """Count ``uid`` as waiting in gang ``key`` (None: not waiting)."""
        was = self.pending.get(uid)
        if was == key:
            return
        if was is not None:
            del self.pending[uid]
            left = self.pending_in[was] - 1
            if left:
                self.pending_in[was] = left
            else:
                del self.pending_in[was]
        if key is not None:
            self.pending[uid] = key
            self.pending_in[key] = self.pending_in.get(key, 0) + 1

    def join(self, uid: str, pod: Pod) -> None:
        """Our pod ``uid`` is (now) ``pod``, a member of its gang."""
        self.ours[uid] = pod
        key = gang_key_of(pod)
        members = self.members.setdefault(key, {})
        was = members.get(uid)
        members[uid] = pod
        self._mark(key, uid, pod)
        if (
            was is not None
            and was.first_attempt != pod.first_attempt
            and replace(was, first_attempt=pod.first_attempt) == pod
        ):
            return  # our own first-attempt mark came back: nothing for a pass to decide
        self.touched.add(key)
        for named in (pod.gang.groups or ()) if pod.gang else ():
            self.named_by.setdefault(named, set()).add(key)
        for owner in _owners_of_pod(pod):
            self.owned.setdefault(owner, set()).add(key)
            self._owners_of_gang.setdefault(key, set()).add(owner)

    def unname(self, key: GangKey) -> None:
        """``key`` names no group now."""
        for named in [n for n, by in self.named_by.items() if key in by]:
            by = self.named_by[named]
            by.discard(key)
            if not by:
                del self.named_by[named]

    def leave(self, uid: str, pod: Pod) -> set[str]:
        """Our pod ``uid`` (``pod`` as it was) left its gang. Returns the nodes where the
        gang held room, if that was its last member: the room is free now (``remember``)."""
        key = gang_key_of(pod)
        self._mark(key, uid, None)
        members = self.members.get(key)
        released: set[str] = set()
        if members is not None and members.pop(uid, None) is not None and not members:
            del self.members[key]
            # The gang is gone: so is what was remembered of it, and the room it held.
            forgotten = self.memory.pop(key, None)
            if forgotten is not None:
                released = {node for _, node in _holds((forgotten,))}
            # Every owner any member named (members of two Jobs; a member whose Job changed).
            for owner in self._owners_of_gang.pop(key, ()):
                gangs = self.owned.get(owner)
                if gangs is not None:
                    gangs.discard(key)
                    if not gangs:
                        del self.owned[owner]
        self.touched.add(key)
        return released

    def _mark(self, key: GangKey, uid: str, pod: Pod | None) -> None:
        if pod is not None and pod.disrupted is not None and pod.bound and pod.alive:
            self._marked.setdefault(key, set()).add(uid)
            return
        uids = self._marked.get(key)
        if uids is not None:
            uids.discard(uid)
            if not uids:
                del self._marked[key]

    def not_ours(self, uid: str) -> None:
        self.ours.pop(uid, None)

    def touch(self, key: GangKey) -> None:
        """Have the next pass look at ``key`` again (a status write that failed, say)."""
        self.touched.add(key)
        self.changed()

    # -- memory and the parked ------------------------------------------------------------

    def remember(self, memory: dict[GangKey, GangState]) -> set[str]:
        """Keep what the last pass decided about each gang, for the next pass. A gang whose
        memory the shell updated while the pass ran (a rejected bind) keeps that update; a
        gang without pods any more is forgotten. Returns the nodes where holds the pass let
        go (NonStrict reservations, a preemptor's nominated room, a head gang's room) free
        room, as surely as a finished pod: they count as changed, so that gangs parked for
        want of that room are woken by its release, which no node event announces."""
        held, still = _holds(self.memory.values()), _holds(memory.values())
        kept = {key: self.memory[key] for key in self._updated if key in self.memory}
        self.memory = {key: state for key, state in memory.items() if key in self.members}
        self.memory.update(kept)
        self._updated.clear()
        self._index_parked()
        return {node for _, node in held - still}

    def update(self, key: GangKey, state: GangState) -> None:
        """The shell changed a gang's memory (a rejected bind): the next pass sees it."""
        self.memory[key] = state
        self._updated.add(key)
        self.changed()

    def _index_parked(self) -> None:
        self._parked_by_shape = {}
        self._parked_by_queue = {}
        self._due_at = {}
        self._stale_due = {
            key: state.stale.due for key, state in self.memory.items() if state.stale is not None
        }
        for key, state in self.memory.items():
            parked = state.parked
            if parked is None or state.reservations or state.head_target:
                # A NonStrict holder, a head or a reservation must be in every pass: their
                # holds are taken there.
                continue
            self._due_at[key] = parked.due_at
            for shape in parked.shapes:
                self._parked_by_shape.setdefault(shape, set()).add(key)
            for queue, _ in parked.queues:
                self._parked_by_queue.setdefault(queue, set()).add(key)
        # A woken gang stays woken until a pass tried it (it may still be backing off).
        for key, parked_at in list(self._woken.items()):
            state = self.memory.get(key)
            if state is None or state.parked is None or state.parked.generation != parked_at:
                del self._woken[key]

    def _wake(self, keys: Iterable[GangKey]) -> None:
        for key in keys:
            state = self.memory.get(key)
            if state is not None and state.parked is not None:
                self._woken.setdefault(key, state.parked.generation)

    def wake_on_nodes(self, changed: list[NodeInfo], *, known: Callable[[str], bool]) -> None:
        """Nodes changed since the last snapshot that now have room for a parked gang's
        member wake that gang (room alone: the pass checks the rest)."""
        if not self._parked_by_shape:
            return
        for info in changed:
            if not known(info.name):
                continue
            free = info.free
            for shape, keys in self._parked_by_shape.items():
                if all(free.get(r, 0) >= a for r, a in shape.items()):
                    self._wake(keys)

    def wake_on_queues(self, *, parent: Callable[[str], str | None]) -> None:
        """Room freed in a queue wakes the gangs parked under it or under a queue above it
        (a parent's capability is its children's too); the pass checks whether it helps."""
        freed, self.freed_queues = self.freed_queues, set()
        if not freed or not self._parked_by_queue:
            return
        for queue in freed:
            at: str | None = queue
            seen: set[str] = set()
            while at is not None and at not in seen:
                seen.add(at)
                self._wake(self._parked_by_queue.get(at, ()))
                at = parent(at)

    def active(
        self, now: float | None, *, groups_of: Callable[[GangKey], Iterable[GangKey]]
    ) -> set[GangKey]:
        """Gangs a pass must look at: changed ones, ones with a member waiting (unless parked
        and neither woken nor due at ``now``), those whose stale grace ends, and every gang
        of their GangGroups (both ways: named by them, or naming them; ``groups_of``: what
        a gang's PodGroup names)."""
        active = set(self.touched)
        waiting = set(self.pending_in)
        if now is not None:
            due = self._due_at
            waiting = {
                key for key in waiting if key not in due or key in self._woken or due[key] <= now
            }
        active.update(waiting)
        active.update(k for k, due in self._stale_due.items() if now is None or due <= now)
        active.update(self._marked)
        todo = list(active)
        while todo:
            key = todo.pop()
            related: set[GangKey] = set(self.named_by.get(key, ()))
            owners: set[OwnerKey] = set()
            for pod in self.members.get(key, {}).values():
                related.update((pod.gang.groups or ()) if pod.gang else ())
                if pod.gang is not None and pod.gang.owner is not None:
                    owners.add(pod.gang.owner)
            for owner in owners:  # once per owner, not per member
                related.update(self.owned.get(owner, ()))
            related.update(groups_of(key))
            for other in related - active:
                active.add(other)
                todo.append(other)
        return active

    def taken(self) -> None:
        """A snapshot was taken: a new round of tracking begins, so a change that lands
        while its pass runs asks for the next one."""
        self.touched.clear()
        self.dirty = self.urgent = False
        self._updated.clear()

    def tier_needs(self) -> list[tuple[str, int]]:
        """What the waiting gangs need free inside one unit of a level (their hard
        networkTopology), as the passes that last looked at them found it."""
        return [
            need
            for state in self.memory.values()
            if not (state.satisfied or state.timed_out)  # a timed-out gang is not tried
            for need in state.tier_needs
        ]


def _holds(states: Iterable[GangState]) -> set[tuple[PodRef, str]]:
    return {hold for s in states for hold in s.holds}


def _owners_of_pod(pod: Pod) -> tuple[OwnerKey, ...]:
    """The owner objects whose changes are work for ``pod``'s gang: those that make it, and
    the Job that controls it, whose status counts the gang's completions (``Gang.completed``)."""
    if pod.gang is None:
        return ()
    owners = owners_of(pod.gang.owner, pod.gang.part)
    job = job_of(pod)
    return owners if job is None or job in owners else (*owners, job)
