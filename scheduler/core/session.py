"""A Session: one pass over an immutable snapshot, and the state its actions share.

Opening a session resolves the gangs, restores each gang incarnation's memory, builds the
ledger of free capacity and takes back the NonStrict holds. Actions (``core/actions/``) then
walk the GangGroups in queue order, each turn on a Statement of its own; they share the
policy kept here: the queue order, whether a gang is ready to be tried (its spec, its
members, its backoff, its timeout), what it holds, and how a failure is said. Closing the
session turns what was decided into a ``Result``. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from scheduler.core.arranging import Arranger, Tree, placement_tree, ranks
from scheduler.core.claiming import DeviceWorld, no_selectors
from scheduler.core.filtering import volume_problem, volume_terms
from scheduler.core.fragmentation import tier_needs, tiered
from scheduler.core.gangs import gang_groups, priority_of, queue_key, resolve, topology_of
from scheduler.core.neighbouring import Neighbours
from scheduler.core.placing import Ledger, NodeFinder, Signature
from scheduler.core.queues import QueueBook, QueueRoom, decayed_usage
from scheduler.core.statement import Kind, Operation, Statement
from scheduler.core.statuses import NOT_TRIED, PENDING_PHASE, SCHEDULING_PHASE, desired_status
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import (
    NORMAL,
    WARNING,
    ActionError,
    Attempt,
    Binding,
    ClaimWrite,
    Event,
    Eviction,
    GroupBinding,
    Nomination,
    ObjectRef,
    Placement,
    PodCondition,
    PodPatch,
    Result,
    StatusUpdate,
    Verdict,
)
from scheduler.model.devices import Allocation, ResourceClaim
from scheduler.model.gangs import Gang, PodGroup, PodGroupStatus, queue_of_pod
from scheduler.model.holdings import holdings
from scheduler.model.pods import (
    SINGLE_PREFIX,
    SUCCEEDED,
    GangKey,
    Mode,
    Pod,
    PodGroupApi,
    PodRef,
)
from scheduler.model.queues import DEFAULT_QUEUE, QUEUE_API, Queue, QueueUsage, beyond_default
from scheduler.model.resources import Resources, describe
from scheduler.model.snapshot import GangState, Snapshot
from scheduler.model.status import Status
from scheduler.model.times import format_time, parse_time
from scheduler.model.topology import Topology

# Condition reasons, as `kubectl describe pg` shows them.
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_WAITING = "Waiting"
REASON_TIMEOUT = "Timeout"
REASON_INVALID = "InvalidSpec"
REASON_SCHEDULER_ERROR = "SchedulerError"  # kube-scheduler's PodScheduled reason for a bug
REASON_GATED = "SchedulingGated"  # the reason the API server gives a gated pod's PodScheduled
# A preemption that has not led to a bind within this long releases the room held for it.
NOMINATION_SECONDS = 120.0


@dataclass(slots=True)
class Outcome:
    """What the session decided about one gang, before it becomes events and status. Each
    change made while a turn is open goes on that turn's Statement, so undoing the turn puts
    the old value back."""

    state: GangState
    condition: tuple[str, str, str] = NOT_TRIED
    bindings: list[Binding] = field(default_factory=list)
    relaxed: tuple[str, ...] = ()  # soft topology constraints the placement could not meet
    # Set while a satisfied gang has fewer than minMember members left.
    below_min: str | None = None
    session: Session | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: object) -> None:
        session = getattr(self, "session", None)
        turn = session.open if session is not None else None
        if turn is not None:
            old = getattr(self, name)
            turn.changed(undo=lambda: object.__setattr__(self, name, old))
        object.__setattr__(self, name, value)

    def bind(self, *bindings: Binding) -> None:
        """Add members placed for the gang in this turn."""
        self.bindings = [*self.bindings, *bindings]


class _Cursors:
    """The node finder's cursors at each mark of a turn's Statement, as its listener: when
    what followed a mark is undone, the ledger is as it was then, and so must the cursors
    be (they move past nodes without room, assuming room only shrinks)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._at: dict[int, dict] = {}

    def marked(self, mark: int) -> None:
        finder = self._session.__dict__.get("finder")
        self._at[mark] = finder.mark() if finder is not None else {}

    def undone_to(self, mark: int) -> None:
        finder = self._session.__dict__.get("finder")
        if finder is None:
            return
        kept = [at for at in self._at if at <= mark]
        finder.restore(self._at[max(kept)] if kept else {})
        for at in [at for at in self._at if at > mark]:
            del self._at[at]


_NO_STATUS = PodGroupStatus()


# Told what came of each turn, in the turn (``Session.watch``): the session, the record, the
# open Statement (None outside a turn) and the mark where the turn's work for it began.
Watcher = Callable[["Session", Attempt, "Statement | None", int], None]


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


def of_timeout(pod: Pod, state: GangState) -> bool:
    """Whether a pending pod belongs to the incarnation that timed out: it carries the mark,
    or it existed when the gang timed out."""
    at = state.timed_out_at
    return pod.timed_out or (at is not None and pod.created <= at)


def pending(gang: Gang) -> list[Pod]:
    """The members still to be placed: unbound, alive and not gated. A gated pod is not
    placed until its spec.schedulingGates are gone (kube-scheduler's PreEnqueue): until
    then it counts as a member that does not exist yet."""
    return [p for p in gang.members if not p.bound and p.alive and not p.gates]


def gated(gang: Gang) -> list[Pod]:
    """The members that would be pending but for their spec.schedulingGates."""
    return [p for p in gang.members if not p.bound and p.alive and p.gates]


def _queues_matter(queues: Mapping[str, Queue], gangs: Iterable[Gang]) -> bool:
    """Whether queues can change anything in this pass: some queue besides a default without
    limits exists, or a gang names one. Else the pass goes as without queues, and does not
    count what every queue holds (a walk over every bound pod)."""
    return beyond_default(queues) or any(g.queue not in ("", DEFAULT_QUEUE) for g in gangs)


class Session:
    """The bookkeeping of one pass; it never outlives the call to ``schedule``."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        now: float,
        config: Config,
        committed: Callable[[GroupBinding], None] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.now = now
        self.config = config
        resolution = resolve(snapshot, config)
        self.gangs = {key: self._checked(gang) for key, gang in resolution.gangs.items()}
        self.missing_podgroups = resolution.missing_podgroups
        self.missing_groups = resolution.missing_groups
        self.missing_owners = resolution.missing_owners
        self.topology_notes: tuple[str, ...] = ()
        self.infos = snapshot.infos()  # worked out from the pods, when the cache gave none
        self.devices = self._device_world()
        self.ledger = Ledger.over(snapshot.nodes, self.infos, devices=self.devices)
        self.outcomes: dict[GangKey, Outcome] = {}
        self.events: list[Event] = []
        self.patches: list[PodPatch] = []
        self.conditions: list[PodCondition] = []
        self.evictions: list[Eviction] = []
        self.nominations: list[Nomination] = []
        # The room held in this pass for preemptors' nominated members, by gang: preemption
        # gives a gang's own holds back before it looks for victims again.
        self.nominated_holds: dict[GangKey, dict[PodRef, str]] = {}
        self.bindings: list[GroupBinding] = []
        # Pods counted in their queue's book as nominated (not to be counted when they bind).
        self.counted_refs: set[PodRef] = set()
        # What came of each GangGroup's turns, action by action (``attempted``), and the
        # turns that raised.
        self.attempts: list[Attempt] = []
        self.errors: list[ActionError] = []
        self.action = ""  # the action running now (``framework.run_actions``)
        self.open: Statement | None = None  # the Statement of the turn open now
        self._watchers: list[Watcher] = []
        self.wake_at: float | None = None
        # Member shapes of Strict gangs that failed in this pass: within a pass capacity only
        # shrinks (a discarded Statement puts back exactly what it took), so a gang of the
        # same shapes fails too, without another scan. An eviction would clear it.
        self.failed_shapes: dict[tuple, tuple[Status, list[str]]] = {}
        self._helps: dict[tuple, list[str]] = {}  # (generation, requests) -> roomy changed nodes
        self._domains: dict[str, Mapping[tuple[str, ...], frozenset[str]]] = {}
        # Time-based fair share (#22): the queues' recent usage as this pass updated it (the
        # snapshot's, unchanged, when the pass built no queue book).
        self.queue_usage: QueueUsage | None = snapshot.queue_usage
        self._changed: dict[int, list[str]] = {}  # generation -> nodes changed since
        for key, gang in self.gangs.items():
            state = self._incarnation(gang, snapshot.memory.get(key))
            self.outcomes[key] = Outcome(
                state=state, condition=state.condition or NOT_TRIED, session=self
            )
        self._hold_reservations()
        # Told each GangGroup's binds as its turn commits them (``schedule``'s ``committed``),
        # unless claims are in play: their writes are worked out when the session closes.
        self._committed = committed if committed and not self.claims_in_play else None

    # -- what the actions place with ----------------------------------------------------------

    @cached_property
    def finder(self) -> NodeFinder:
        snapshot = self.snapshot
        neighbours = Neighbours(
            snapshot.nodes, self.infos, namespace_labels=snapshot.namespace_labels
        )
        return NodeFinder(
            snapshot.nodes,
            self.ledger,
            infos=self.infos,
            neighbours=neighbours,
            volumes=lambda pod: volume_terms(pod, claims=snapshot.claims, volumes=snapshot.volumes),
            scoring=self.config.scoring,
        )

    def _device_world(self) -> DeviceWorld:
        snapshot = self.snapshot
        return DeviceWorld(
            slices=snapshot.resource_slices,
            classes=snapshot.device_classes,
            claims=snapshot.resource_claims,
            evaluate=snapshot.selectors or no_selectors,
        )

    def volume_problem(self, pod: Pod) -> str:
        """Why the pod's storage or devices keep it from being placed anywhere yet."""
        if pod.resource_claims:
            claims = self.devices.claims_of(pod)
            if isinstance(claims, str):
                return claims
        if not pod.claims:
            return ""
        snapshot = self.snapshot
        return volume_problem(pod, claims=snapshot.claims, modes=snapshot.binding_modes)

    # -- queues (#22) ----------------------------------------------------------------------------

    @cached_property
    def book(self) -> QueueBook | None:
        """The queues of this pass; None where the API server serves none (no queues: every
        gang competes on priority and age alone)."""
        queues = self.snapshot.queues
        if queues is None or not _queues_matter(queues, self.gangs.values()):
            return None
        return self.queue_book(queues)

    def queue_book(self, queues: Mapping[str, Queue]) -> QueueBook:
        """The book of ``queues`` on this snapshot: what each holds (our bound pods, by
        queue, those leaving included, and the room nominated to its preemptors and
        reclaimers, which they will bind), what of it is leaving, what each waits for, and
        the room the cluster has for them all."""
        names = self.config.scheduler_names
        given = self.snapshot.queue_holdings  # summed by the cache as nodes changed
        if given is None or given.ours != names:
            given = holdings(
                self.snapshot.nodes, self.infos, ours=names, podgroups=self.snapshot.podgroups
            )
        usage = {queue: dict(amounts) for queue, amounts in given.held.items()}
        leaving = {queue: dict(amounts) for queue, amounts in given.leaving.items()}
        total = dict(given.room)
        waiting = self.snapshot.queue_waiting
        if waiting is None:  # not counted by a cache: the pending members of this pass
            waiting = {}
            for gang in self.gangs.values():
                for pod in pending(gang):
                    waiting[gang.queue] = waiting.get(gang.queue, Resources()) + pod.requests
        wanted = {(name or DEFAULT_QUEUE): amounts for name, amounts in waiting.items()}
        for key, outcome in self.outcomes.items():
            nominated = outcome.state.nominated
            if not nominated:
                continue
            gang = self.gangs[key]
            into = usage.setdefault(gang.queue or DEFAULT_QUEUE, {})
            for pod in pending(gang):
                if pod.ref in nominated:
                    self.counted_refs.add(pod.ref)
                    for resource, amount in pod.requests.items():
                        into[resource] = into.get(resource, 0) + amount
        past = None
        half_life = self.config.fair_share_half_life_seconds
        if half_life is not None:
            self.queue_usage = decayed_usage(
                self.snapshot.queue_usage, usage, now=self.now, half_life=half_life
            )
            past = self.queue_usage.average
        return QueueBook(
            queues, usage=usage, total=total, waiting=wanted, leaving=leaving, past=past
        )

    def queue_of(self, pod: Pod) -> str:
        """The queue a pod of ours counts against, by name ("default" for none)."""
        return queue_of_pod(pod, self.snapshot.podgroups) or DEFAULT_QUEUE

    def _held_by_queue(self, gang: Gang) -> bool:
        """Whether the gang's queue would not let its minimum in now: Closed, unknown or
        invalid, or over a capability (its own or an ancestor's) with what the queues hold
        as the pass leaves them; Volcano's enqueue action keeps such a PodGroup Pending."""
        book = self.book
        if book is None:
            return False
        if book.problem(gang.queue) is not None:
            return True
        room = self.queue_room()
        minimum = Resources.total(p.requests for p in self.ordered(pending(gang))[: gang.need])
        return room is not None and bool(room.refuse(gang.queue, minimum, guarantees=False))

    def queue_room(self, ledger: Ledger | None = None) -> QueueRoom | None:
        """The room a turn may take in each queue, on ``ledger`` (a trial's, with its
        victims gone; else the pass's); None without queues."""
        book = self.book
        if book is None:
            return None
        return QueueRoom(book, free=lambda: self.free_total(ledger))

    def free_total(self, ledger: Ledger | None = None) -> dict[str, int]:
        """The free room of the ready, schedulable nodes, summed."""
        ledger = ledger if ledger is not None else self.ledger
        free: dict[str, int] = {}
        for name, node in self.snapshot.nodes.items():
            if node.ready and not node.unschedulable:
                for resource, amount in ledger.free(name).items():
                    free[resource] = free.get(resource, 0) + max(amount, 0)
        return free

    @cached_property
    def topology(self) -> Topology:
        """Only passes with a topology-placed gang build it (a flat tree sorts every node)."""
        return topology_of(self.snapshot, self.config)

    def domains(self, level: str) -> Mapping[tuple[str, ...], frozenset[str]]:
        """The units of ``level`` and their nodes, built once a pass (#23: a gang's
        networkTopology keeps it inside one of them). A unit is its path from the top:
        racks of the same name in two zones are two units (review of #23)."""
        found = self._domains.get(level)
        if found is None:
            topology = self.topology
            end = topology.levels.index(level) + 1
            units: dict[tuple[str, ...], set[str]] = {}
            for name, path in topology.paths.items():
                units.setdefault(tuple(path[:end]), set()).add(name)
            found = self._domains[level] = {u: frozenset(n) for u, n in units.items()}
        return found

    def unit_of(self, node: str, level: str) -> tuple[str, ...]:
        """The unit of ``level`` a node of the topology is in, as ``domains`` keys it."""
        topology = self.topology
        return tuple(topology.paths[node][: topology.levels.index(level) + 1])

    @cached_property
    def arranger(self) -> Arranger:
        """Built on first use: passes without topology-placed gangs never pay for it."""
        tree = Tree.of(self.topology, self.snapshot.nodes)
        self.topology_notes = tree.notes()
        return Arranger(tree, self.finder)

    def _checked(self, gang: Gang) -> Gang:
        """A topology-placed gang whose constraints do not fit the topology is invalid."""
        if gang.constraints is None:
            return gang
        problems = gang.constraints.problems(levels=self.topology.levels, size=gang.total)
        return replace(gang, errors=(*gang.errors, *problems)) if problems else gang

    # -- incarnations and holds -----------------------------------------------------------------

    def _incarnation(self, gang: Gang, remembered: GangState | None) -> GangState:
        """The state of the gang's current incarnation: what the last pass remembered, if it
        was about these very objects and that incarnation still goes on; else a fresh one."""
        uids = frozenset(p.ref.uid for p in gang.members)
        podgroup_uid = gang.podgroup.uid if gang.podgroup else ""
        # Satisfied only by a bind the API server confirmed: an assumed one may yet be
        # rejected, and with it the whole group (see in_flight).
        flying = self.snapshot.in_flight
        # Or enough of its members completed (Succeeded): the rest join them one by one,
        # unless something stops the gang from being tried at all (review: an invalid gang, a
        # PodGroup or owner that does not exist must say so, not bind).
        live = any(p.bound and p.alive and p.ref.uid not in flying for p in gang.members) or (
            gang.need == 0 and bool(pending(gang)) and self.blocker(gang) is None
        )
        todo = pending(gang)
        state = remembered
        if state is not None and (
            state.podgroup_uid != podgroup_uid or (state.members and not state.members & uids)
        ):
            state = None  # a PodGroup or pods created anew under the same name
        if state is None:
            state = self._recovered_state(gang)
        elif state.satisfied and not live and not self.in_flight(gang):
            # Every bound member finished or went: the next members are a new incarnation.
            # Until they come the gang keeps what it last said (Finished, say).
            state = GangState(condition=None if todo else state.condition)
        elif state.timed_out and todo and not any(of_timeout(p, state) for p in todo):
            state = GangState()  # every pod the timeout marked has gone: the new ones start anew
        reservations = {} if live else state.reservations
        below_min_said = state.below_min_said and live
        if (
            state.podgroup_uid == podgroup_uid
            and state.members == uids
            and state.satisfied == live
            and state.reservations == reservations
            and state.below_min_said == below_min_said
        ):
            return state  # the common case of a settled gang: nothing to rebuild
        # A gang satisfied until now (binds in flight kept its memory above) has no clock of
        # its own: if it needs one again, it starts afresh, not from the incarnation before
        # (found by test_stateful: an after-gang bind in flight failed once the last bound
        # member had gone, and the gang timed out on the old incarnation's clock).
        first_attempt = None if state.satisfied and not live else state.first_attempt
        return replace(
            state,
            podgroup_uid=podgroup_uid,
            members=uids,
            satisfied=live,
            reservations=reservations,
            below_min_said=below_min_said,
            first_attempt=first_attempt,
        )

    def _recovered_state(self, gang: Gang) -> GangState:
        """After a restart (or the first sight of a gang): the first attempt is read back from
        the PodGroup's status while it says the gang is still being scheduled, else from the
        members' first-attempt annotation, but only when every pending member carries it (a
        member without it belongs to a later incarnation: an old mark must not time it out;
        a clock started late is the lesser harm). A preemptor's nomination comes back from
        its members' ``status.nominatedNodeName``, so the room its victims freed is still held
        for it after a restart or a failover (kube-scheduler reads them back too), with a
        fresh ``NOMINATION_SECONDS``."""
        nominated = {p.ref: p.nominated_node for p in pending(gang) if p.nominated_node}
        since = self.now if nominated else None
        # Its victims are not known any more: the pods being deleted where it was nominated
        # are what it waits for.
        infos = self.infos if nominated else {}
        victims = frozenset(
            p.ref.uid
            for node in set(nominated.values())
            if node in infos
            for p in infos[node].pods
            if p.deleting
        )
        if gang.podgroup is not None and gang.podgroup.api is PodGroupApi.OURS:
            status = gang.podgroup.status
            waiting = status.phase in ("", PENDING_PHASE, SCHEDULING_PHASE)
            start = parse_time(status.schedule_start_time) if waiting else None
            return GangState(
                first_attempt=start, nominated=nominated, nominated_at=since, victims=victims
            )
        marks = [p.first_attempt for p in pending(gang)]
        known = [m for m in marks if m is not None]
        first = min(known) if known and len(known) == len(marks) else None
        return GangState(
            first_attempt=first, nominated=nominated, nominated_at=since, victims=victims
        )

    def in_flight(self, gang: Gang) -> bool:
        """Whether binds of the gang are still in flight (assumed, not confirmed)."""
        flying = self.snapshot.in_flight
        return bool(flying) and any(p.ref.uid in flying for p in gang.members)

    def _hold_reservations(self) -> None:
        """Drop the NonStrict holds that are stale (their pod or node gone). They are not
        taken from the ledger here: each gang takes its holds again at its own turn, in
        queue order, so a gang ahead of it (higher priority, or older) may have their room
        first (``allocate.keep_holds``). Preemptors' nominations are held before any turn."""
        for key, outcome in self.outcomes.items():
            held = outcome.state.reservations
            if not held or outcome.state.nominated:
                continue
            nodes = self.snapshot.nodes
            gang = self.gangs.get(key)
            # A gang no longer NonStrict (its mode changed, or a subGroupPolicy made it
            # Strict) keeps no holds: they are taken again only by keep_holds, and a hold
            # not taken again must never be bound (review of #23: over-committed nodes).
            strict = gang is None or gang.mode is not Mode.NON_STRICT
            kept = {} if strict else {ref: node for ref, node in held.items() if node in nodes}
            if kept != held:
                outcome.state = replace(outcome.state, reservations=kept)
        self._hold_nominations()

    def _hold_nominations(self) -> None:
        """A preemptor's room, as its victims leave: each nominated member whose node has
        room again holds it (as a reservation: taken before any other gang's turn, so no
        gang of lower priority takes what was freed for it; never bound until the whole gang
        fits). A nomination lapses after ``NOMINATION_SECONDS`` without a bind."""
        for key, outcome in self.outcomes.items():
            state = outcome.state
            if not state.nominated:
                continue
            gang = self.gangs[key]
            since = state.nominated_at if state.nominated_at is not None else self.now
            if self.timed_out(gang) or self.now - since >= NOMINATION_SECONDS:
                message = (
                    f"gang {key} did not bind within {NOMINATION_SECONDS:g}s of its "
                    "preemption; the room held for it is released"
                )
                self.say(gang, reason="PreemptionExpired", message=message, pods=pending(gang))
                self.add(self.nominations, *(Nomination(ref, "") for ref in state.nominated))
                outcome.state = replace(
                    state, nominated={}, victims=frozenset(), nominated_at=None, reservations={}
                )
                continue
            self.wake(since + NOMINATION_SECONDS)  # to let it go then, if nothing else wakes it
            waiting = {p.ref: p for p in pending(gang)}
            held: dict[PodRef, str] = {}
            for ref, node in sorted(state.nominated.items()):
                pod = waiting.get(ref)
                if pod is None or node not in self.snapshot.nodes:
                    continue
                if self.ledger.admits(pod, node):
                    self.ledger.place(pod, node)
                    held[ref] = node
            self.nominated_holds[key] = held
            outcome.state = replace(state, reservations=held)

    def awaiting_victims(self, gang: Gang) -> bool:
        """Whether a preemptor waits for its victims: a nominated member has no room yet
        and a victim is still there. Victims on nodes it was not nominated to do not hold it
        back once every nominated member has its room (kube-scheduler never waits for them)."""
        state = self.outcomes[gang.key].state
        if not state.nominated or not self.victims_present(state):
            return False
        waiting = {p.ref for p in pending(gang)}
        return any(ref in waiting and ref not in state.reservations for ref in state.nominated)

    def starvation_after(self, gang: Gang) -> float:
        """How long the gang may wait before it is the head gang: its own starvation-after,
        else the scheduler's."""
        if gang.starvation_seconds is not None:
            return gang.starvation_seconds
        return self.config.starvation_seconds

    def victims_present(self, state: GangState) -> bool:
        """Whether a pod this gang evicted is still on its node (being deleted)."""
        if not state.victims:
            return False
        return any(p.ref.uid in state.victims for info in self.infos.values() for p in info.pods)

    # -- the policy the actions share -------------------------------------------------------

    def units(self) -> Iterator[tuple[GangKey, ...]]:
        """The GangGroups in queue order: priority, then age, then name (seed 000); but
        first any group with a gang cut short (satisfied with fewer than min_member members
        bound: the scheduler died between its binds), whose remaining members had room when
        it was decided, so that they get it back before anyone else takes it.

        With queues, the next group comes from the queue furthest below its fair share
        (``QueueBook.order``) as the shares stand when it is asked for, in that order inside
        the queue: what each turn commits counts against its queue as it commits, so the
        next group is chosen after it."""
        classes = self.snapshot.priority_classes
        queue_of: dict[tuple[GangKey, ...], str] = {}
        cut: set[tuple[GangKey, ...]] = set()

        def unit_order(unit: tuple[GangKey, ...]) -> tuple:
            present = [self.gangs[k] for k in unit if k in self.gangs]
            if any(self.cut_short(g) for g in present):
                cut.add(unit)
            key, queue_of[unit] = min((queue_key(g, classes), g.queue) for g in present)
            return (unit not in cut, key)

        ordered = sorted(gang_groups(self.gangs), key=unit_order)
        book = self.book
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
                self._count_in(book, gang.queue, members[ref].requests, ref=ref)

    def _count_in(
        self, book: QueueBook, queue: str, amounts: Resources, *, ref: PodRef | None = None
    ) -> None:
        """Count ``amounts`` against ``queue`` in the book (``ref``: a nominated member, not
        to be counted again when it binds); undone with the open turn."""
        book.take(queue, amounts)
        if ref is not None:
            self.counted_refs.add(ref)
        turn = self.open
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
        if self.open is not None:
            self.open.changed(undo=lambda: book.leave(queue, {r: -a for r, a in amounts.items()}))

    def add(self, into: list, *items: object) -> None:
        """Append decisions to one of the session's lists (``bindings``, ``events``,
        ``patches``, ``conditions``, ``evictions``, ``nominations``, ``attempts``), on the
        open turn's Statement: undoing the turn takes them back."""
        if not items:
            return
        start = len(into)
        into.extend(items)
        turn = self.open
        if turn is not None:

            def undo() -> None:
                del into[start:]

            turn.decide((into, items), undo=undo)

    def set(self, name: str, value: object) -> None:
        """Change a field of the session on the open turn's Statement."""
        old = getattr(self, name)
        setattr(self, name, value)
        if self.open is not None:
            self.open.changed(undo=lambda: setattr(self, name, old))

    # -- as a listener of each turn's Statement ---------------------------------------------

    def done(self, op: Operation) -> None:
        if op.kind is Kind.EVICT:
            # Room came back: a shape that failed earlier in the pass may fit now.
            self.failed_shapes.clear()

    def committed(self, ops: tuple[Operation, ...]) -> None:
        """The bindings a commit keeps count against their queues (the next group is
        chosen with them counted) and are final: the shell may start binding them."""
        groups = [
            group
            for op in ops
            if op.kind is Kind.DECIDE and op.what[0] is self.bindings  # type: ignore[index]
            for group in op.what[1]  # type: ignore[index]
        ]
        if not groups:
            return
        book = self.book
        if book is not None:
            for group in groups:
                for placed in group.gangs:
                    gang = self.gangs.get(placed.gang)
                    if gang is None:
                        continue
                    requests = {p.ref: p.requests for p in gang.members}
                    for binding in placed.bindings:
                        if binding.pod not in self.counted_refs:  # nominated: counted already
                            book.take(gang.queue, requests.get(binding.pod, {}))
        if self._committed is not None:
            for group in groups:
                self._committed(group)

    def cut_short(self, gang: Gang) -> bool:
        """Satisfied, yet with fewer than min_member members bound and alive, and some
        waiting: an all-or-nothing commit that was interrupted."""
        if not self.outcomes[gang.key].state.satisfied:
            return False
        bound = sum(1 for p in gang.members if p.bound and p.alive)
        return bound + gang.completed < gang.min_member and bool(pending(gang))

    def ordered(self, pods: list[Pod]) -> list[Pod]:
        """Members in the order they are placed: priority, then age, then name."""
        classes = self.snapshot.priority_classes
        return sorted(pods, key=lambda p: (-priority_of(p, classes), p.created, p.ref))

    def wake(self, at: float) -> None:
        if at > self.now and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at

    def timed_out(self, gang: Gang) -> bool:
        state = self.outcomes[gang.key].state
        if state.timed_out or any(p.timed_out for p in pending(gang)):
            return True
        if state.first_attempt is None or state.satisfied:
            return False
        deadline = state.first_attempt + gang.timeout_seconds
        if self.now >= deadline:
            return True
        self.wake(deadline)
        return False

    def blocker(self, gang: Gang) -> tuple[str, str, str] | None:
        """What stops ``gang`` from being tried, as (condition reason, event reason, message),
        or None: its spec is invalid, or something it names does not exist (yet)."""
        if gang.errors:
            return (
                REASON_INVALID,
                "InvalidGangSpec",
                f"gang {gang.key} is not scheduled: " + "; ".join(gang.errors),
            )
        book = self.book
        problem = book.problem(gang.queue) if book is not None else None
        if problem is not None:
            event, message, _ = problem
            return (REASON_WAITING, event, f"gang {gang.key} waits: {message}")
        if gang.key in self.missing_groups:
            return (
                REASON_WAITING,
                "GroupNotFound",
                f"waiting for the group ConfigMap of Sakkara group {gang.key.name}: create a "
                f"ConfigMap labelled {names.SAKKARA_GROUP} in namespace {gang.key.namespace} "
                f"with data name={gang.key.name}, size and constraints",
            )
        if gang.topology_placed and self.snapshot.topology_errors:
            return (
                REASON_WAITING,
                "InvalidTopology",
                f"gang {gang.key} waits for a usable topology ConfigMap: "
                + "; ".join(self.snapshot.topology_errors),
            )
        if gang.key in self.missing_owners:
            return (
                REASON_WAITING,
                "OwnerNotFound",
                f"gang {gang.key} waits: {gang.origin}; or give the pods the annotation "
                f"{names.OWNER_GANG}: none to place them one by one",
            )
        if gang.key in self.missing_podgroups:
            claim = next((p.gang for p in gang.members if p.gang is not None), None)
            api = claim.source.api if claim is not None else PodGroupApi.OURS
            served = (
                ""
                if api is PodGroupApi.OURS
                else f" (if the API server does not serve {api.value}, install or enable it)"
            )
            return (
                REASON_WAITING,
                "PodGroupNotFound",
                f"waiting for PodGroup {gang.key} ({api.value}), which does not exist: "
                f"create it{served}, or give the pods the annotation "
                f"{names.KOORD_MIN_AVAILABLE}",
            )
        return None

    def why_not_ready(self, unit: tuple[GangKey, ...], gangs: list[Gang]) -> str | None:
        """Say (once) why the GangGroup cannot be tried yet; None if it can."""
        for gang in gangs:
            blocked = self.blocker(gang)
            if blocked is not None:
                condition, event, message = blocked
                self.outcomes[gang.key].condition = ("False", condition, message)
                if self.outcomes[gang.key].state.last_message != message:
                    self._say_on_queue(gang, event)
                self.say(gang, reason=event, message=message, pods=pending(gang))
                return message
        for gang in gangs:
            stuck = [(p, why) for p in pending(gang) if (why := self.volume_problem(p))]
            if stuck:
                shown = "; ".join(f"{p.ref.name}: {why}" for p, why in stuck[:3])
                more = f" (and {len(stuck) - 3} more)" if len(stuck) > 3 else ""
                message = f"gang {gang.key} waits: {shown}{more}"
                for other in gangs:
                    self.outcomes[other.key].condition = ("False", REASON_UNSCHEDULABLE, message)
                    self.say(other, reason="FailedScheduling", message=message, pods=pending(other))
                    self.mark_unscheduled(
                        pending(other), reason=REASON_UNSCHEDULABLE, message=message
                    )
                return message
        for gang in gangs:
            missing = [k for k in unit if k not in self.gangs]
            held = len(self.outcomes[gang.key].state.reservations)
            # Members that completed count: a Job does not make them again.
            short = len(pending(gang)) + held + gang.completed < gang.total
            reason, event = REASON_WAITING, "GangWaiting"
            if missing:
                message = (
                    f"waiting for gang {missing[0]} of the same GangGroup, which has no pods yet"
                )
                condition = message
            elif short and (blocked := gated(gang)):
                shown = ", ".join(f"{p.ref.name} ({', '.join(p.gates)})" for p in blocked[:5])
                more = f" and {len(blocked) - 5} more" if len(blocked) > 5 else ""
                message = condition = (
                    f"gang {gang.key} waits for {len(blocked)} gated member(s): {shown}{more}; "
                    "a pod is not placed while its spec.schedulingGates list a gate, and the "
                    f"gang needs {gang.total}: whoever added the gates removes them"
                )
                reason = event = REASON_GATED
            elif short:
                have = len(pending(gang)) + held + gang.completed
                # The event stays the same while members trickle in (one event, not one per
                # arrival); the condition keeps the count current.
                message = (
                    f"gang {gang.key} waits until all {gang.total} members exist before it is tried"
                )
                condition = (
                    f"gang {gang.key} has {have} of {gang.total} members; "
                    f"waiting for {gang.total - have} more"
                )
            else:
                continue
            for other in gangs:
                self.outcomes[other.key].condition = ("False", reason, condition)
                if other.key.name.startswith(SINGLE_PREFIX):
                    continue  # a lone pod: its own PodScheduled condition says it (no Event)
                self.say(
                    other,
                    reason=event,
                    message=message,
                    pods=pending(other) + gated(other),
                    warning=False,
                )
            return message
        return None

    # -- the queue: who is worth trying again --------------------------------------------------

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
        tree = (self.snapshot.topology, gang.sakkara) if gang.topology_placed else ()
        # What its owner says (a gang from an owner: an owner that shrank may help it), and
        # its members that completed (a Job's count of them may rise after its pods went).
        sized = (gang.min_member, gang.total, gang.min_resources, len(gang.group), gang.completed)
        # Its queue and the queues above it (#22): a capability raised may let it in.
        book = self.book
        queues = (
            tuple(book.queues.get(q) for q in book.ancestors(book.name_of(gang.queue)))
            if book is not None
            else ()
        )
        return (*gang.members, spec, tree, sized, queues)

    def park(self, gang: Gang) -> None:
        """The gang failed for want of room: into the unschedulable set until a change could
        help it (only where the snapshot says which nodes changed, i.e. from the cache)."""
        if self.snapshot.node_infos is None:
            return
        outcome = self.outcomes[gang.key]
        if outcome.state.head_target:
            return  # a head gang holds its room every pass: it must stay in the snapshot
        flush = self.now + self.config.unschedulable_flush_seconds
        first = outcome.state.first_attempt
        deadline = first + gang.timeout_seconds if first is not None else flush
        # A Strict gang is looked at again when it becomes the head gang, too (a starvation
        # bound shorter than the flush interval would otherwise be met only at the flush).
        head = first + self.starvation_after(gang) if first is not None else flush
        if gang.mode is not Mode.STRICT or head <= self.now:
            head = flush
        outcome.state = replace(
            outcome.state,
            parked_at=self.snapshot.generation,
            parked_since=self.now,
            tried_with=self.tried_with(gang),
            parked_shapes=frozenset(p.requests for p in pending(gang)),
            parked_queues=self._queue_standing(gang),
            due_at=min(flush, deadline, head),
        )
        self.wake(min(flush, head))

    def unpark(self, gang: Gang) -> None:
        outcome = self.outcomes[gang.key]
        if outcome.state.parked_at is not None:
            outcome.state = replace(
                outcome.state,
                parked_at=None,
                tried_with=(),
                parked_shapes=frozenset(),
                parked_queues=(),
            )

    def _queue_standing(self, gang: Gang) -> tuple[tuple[str, Resources], ...]:
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

    def _queue_freed(self, then: tuple[tuple[str, Resources], ...]) -> bool:
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

    def worth_trying(self, gangs: list[Gang]) -> bool:
        """kube-scheduler's queueing hints, for a GangGroup: try it again only if one of its
        gangs was never parked, its own objects changed, the flush interval passed, or a node
        changed since it failed such that one of its pending members now fits there."""
        flush = self.config.unschedulable_flush_seconds
        for gang in gangs:
            state = self.outcomes[gang.key].state
            if state.parked_at is None or self.now >= state.parked_since + flush:
                return True
            if state.nominated and not self.victims_present(state):
                return True  # the room it preempted for is free (and held for it) now
            if self._queue_freed(state.parked_queues):
                return True  # its queue's limits may let it in now (chaos seed 30092)
            now_with = self.tried_with(gang)
            if len(now_with) != len(state.tried_with) or any(
                not _same(a, b) for a, b in zip(now_with, state.tried_with, strict=True)
            ):
                return True
            # Unchanged: remember the objects as they are now, so the next look is by identity.
            self.outcomes[gang.key].state = replace(state, tried_with=now_with)
            if self._a_change_fits(gang, since=state.parked_at):
                return True
        for gang in gangs:
            self.wake(self.outcomes[gang.key].state.parked_since + flush)
        return False

    def _a_change_fits(self, gang: Gang, *, since: int) -> bool:
        changed = self._changed.get(since)
        if changed is None:
            infos = self.infos
            changed = self._changed[since] = [
                name
                for name in self.snapshot.nodes
                if (info := infos.get(name)) is None or info.generation > since
            ]
        if not changed:
            return False
        shapes: dict[Resources, Pod] = {}
        for pod in pending(gang):
            shapes.setdefault(pod.requests, pod)
        for requests, pod in shapes.items():
            # First by room alone (cheap, shared by every gang of the shape), then by the
            # static filters of the pod, only where some changed node has the room.
            roomy = self._helps.get((since, requests))
            if roomy is None:
                roomy = self._helps[(since, requests)] = [
                    name for name in changed if self.ledger.fits(name, requests)
                ]
            if roomy and any(name in self.finder.static_fit(pod) for name in roomy):
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
        todo = self.ordered(pending(gang))
        if any(p.claims or p.resource_claims for p in todo) or not all(
            self.finder.inert(p, self.ledger) for p in todo
        ):
            # The other pods matter, or its claims (each its own): a gang of the same shapes
            # may fare otherwise.
            return None
        members = tuple((Signature.of(p), p.requests) for p in todo)
        # With queues, a gang of another queue may fare otherwise (its limits are its own);
        # one kept inside a unit of a tier (#23) fares otherwise than one that is not.
        queue = gang.queue if self.book is not None else ""
        return (members, gang.need, queue, gang.network_topology)

    def enough_in_total(self, gang: Gang) -> Status:
        """minResources: a cheap check of the whole gang against the whole cluster."""
        if not gang.min_resources:
            return Status.success()
        free = self.free_total()
        short = gang.min_resources.shortfalls(free)
        if not short:
            return Status.success()
        wanted = {r: gang.min_resources[r] for r in short}
        have = {r: free.get(r, 0) for r in short}
        whose = "PodGroup minResources" if gang.podgroup is not None else "minResources"
        return Status.unschedulable(
            f"{whose} needs {describe(wanted)} in total; the cluster has {describe(have)} free"
        )

    def placement(self, gang: Gang, bindings: list[Binding], retries: int) -> Placement:
        pairs = [(b.pod, b.node) for b in bindings]
        group = gang.sakkara
        return Placement(
            ranks=tuple(ranks(pairs, self.topology)),
            tree=json.dumps(placement_tree(pairs, self.topology)),
            retries=retries,
            begin=min(p.created for p in gang.members),
            group=(group.namespace, group.configmap) if group else None,
            podgroup=gang.key if gang.podgroup is not None else None,
            podgroup_api=gang.podgroup.api if gang.podgroup is not None else PodGroupApi.OURS,
        )

    def refill_ranks(self, gang: Gang, bindings: list[Binding]) -> Placement | None:
        """#23, healing: members of a running topology-placed gang placed now (a lost one
        made again) take the ranks its running members do not hold, the lowest first, in
        rank order (nearest the master first), so a replaced member gets its old rank back.
        Only the rank labels are written (the placement tree stays the gang's first). None
        when no running member carries a rank (nothing was written back yet)."""
        new = {b.pod for b in bindings}
        taken: set[int] = set()
        unlabelled = 0
        for pod in gang.members:
            if pod.ref in new or not pod.bound or pod.deleting:
                continue
            rank = pod.labels.get(names.SAKKARA_RANK, "")
            if (pod.alive or pod.phase == SUCCEEDED) and rank.isdecimal():
                taken.add(int(rank))  # a finished member keeps its rank (second review)
            elif pod.alive:
                unlabelled += 1
        if not taken:
            return None
        # A member healed in an earlier pass whose label is not seen yet holds the rank it
        # was given, the lowest vacant in rank order then and now (second review of #23:
        # the next replacement got it again).
        vacant = (r for r in range(len(taken) + unlabelled + len(bindings)) if r not in taken)
        for _ in range(unlabelled):
            next(vacant)
        order = ranks([(b.pod, b.node) for b in bindings], self.topology)
        return Placement(
            ranks=tuple((ref, next(vacant)) for ref, _ in order),
            tree="",
            retries=1,
            begin=min(p.created for p in gang.members),
        )

    # -- saying things ------------------------------------------------------------------------

    def say(
        self, gang: Gang, *, reason: str, message: str, pods: Iterable[Pod], warning: bool = True
    ) -> None:
        """Event on the gang's pods and PodGroup, once per distinct message."""
        outcome = self.outcomes[gang.key]
        if outcome.state.last_message == message:
            return
        outcome.state = replace(outcome.state, last_message=message)
        kind = WARNING if warning else NORMAL
        said: list[Event] = []
        if gang.podgroup is not None:
            pg = gang.podgroup
            said.append(
                Event(
                    ObjectRef("PodGroup", pg.key.namespace, pg.key.name, pg.uid, pg.api.value),
                    kind,
                    reason,
                    message,
                )
            )
        for pod in pods:
            ref = ObjectRef("Pod", pod.ref.namespace, pod.ref.name, pod.ref.uid)
            said.append(Event(ref, kind, reason, message))
        self.add(self.events, *said)

    def _say_on_queue(self, gang: Gang, reason: str) -> None:
        """A queue that cannot be used is told so on the Queue itself too (once per gang it
        holds back, with the gang's own Event): whoever owns the queue sees what to fix."""
        book = self.book
        problem = book.problem(gang.queue) if book is not None else None
        if book is None or problem is None or reason != "InvalidQueue":
            return
        _, message, at = problem
        queue = book.queues[at]
        ref = ObjectRef("Queue", "", at, queue.uid, QUEUE_API)
        self.add(
            self.events, Event(ref, WARNING, reason, f"{message} (holds back gang {gang.key})")
        )

    def failed_attempt(
        self, gang: Gang, message: str, *, pods: Iterable[Pod], reason: str = REASON_UNSCHEDULABLE
    ) -> None:
        outcome = self.outcomes[gang.key]
        attempts = outcome.state.attempts + 1
        retry_at = self.now + self.config.backoff(attempts)
        outcome.state = replace(outcome.state, attempts=attempts, retry_at=retry_at)
        self.wake(retry_at)
        pods = list(pods)
        self.say(gang, reason="FailedScheduling", message=message, pods=pods)
        self.mark_unscheduled(pods, reason=reason, message=message)
        self._persist_first_attempt(gang)

    def mark_unscheduled(self, pods: Iterable[Pod], *, reason: str, message: str) -> None:
        """``PodScheduled=False`` on each pod, as kube-scheduler writes it after a failed
        attempt, unless the pod says so already. The time of the transition is kept while
        the status stays False (a gated pod's SchedulingGated becoming Unschedulable)."""
        now = format_time(self.now)
        for pod in pods:
            had = pod.scheduled_condition
            if had is not None and had[:3] == ("False", reason, message):
                continue
            since = had[3] if had is not None and had[0] == "False" and had[3] else now
            self.add(self.conditions, PodCondition(pod.ref, "False", reason, message, since))

    def _persist_first_attempt(self, gang: Gang) -> None:
        """A gang that waits keeps its clock across restarts: our PodGroups in their status,
        other gangs on their pods (only pods that do not carry it yet, so once per member;
        the upstream and Volcano PodGroups have no field for it)."""
        state = self.outcomes[gang.key].state
        first = state.first_attempt
        ours = gang.podgroup is not None and gang.podgroup.api is PodGroupApi.OURS
        if ours or first is None or state.satisfied:
            return  # a satisfied gang's members are placed one by one: no clock of theirs
        mark = {names.FIRST_ATTEMPT: format_time(first)}
        self.add(
            self.patches, *(PodPatch(p.ref, mark) for p in pending(gang) if p.first_attempt is None)
        )

    def check_min_member(self, gang: Gang, *, members: int, waiting: int) -> None:
        """Seed 003: a running gang whose running, succeeded and pending members together
        are fewer than minMember cannot work as a gang any more; say so once, so its
        controller (or a person) can restart it whole."""
        succeeded = sum(1 for p in gang.members if p.phase == SUCCEEDED)
        if members + succeeded + waiting >= gang.min_member:
            return
        outcome = self.outcomes[gang.key]
        outcome.below_min = (
            f"gang {gang.key} has {members} running, {succeeded} succeeded and {waiting} "
            f"pending members, fewer than its minMember {gang.min_member}: it cannot work as "
            "a gang until members are added or it is restarted whole"
        )
        if outcome.state.below_min_said:
            return
        outcome.state = replace(outcome.state, below_min_said=True)
        if gang.podgroup is not None:
            pg = gang.podgroup
            ref = ObjectRef("PodGroup", pg.key.namespace, pg.key.name, pg.uid, pg.api.value)
        else:
            alive = next(p for p in gang.members if p.bound and p.alive)
            ref = ObjectRef("Pod", alive.ref.namespace, alive.ref.name, alive.ref.uid)
        self.add(self.events, Event(ref, WARNING, "Unschedulable", outcome.below_min))

    # -- turns --------------------------------------------------------------------------------

    def watch(self, watcher: Watcher) -> None:
        """Tell ``watcher`` what came of every turn from now on (``attempted``)."""
        self._watchers.append(watcher)

    def attempted(
        self,
        gangs: Iterable[Gang],
        verdict: Verdict,
        status: Status | None = None,
        *,
        since: int = 0,
    ) -> None:
        """Record what came of a GangGroup's turn in the running action. The watchers hear
        of it first, in the turn (``since``: the mark of the open Statement where this work
        began, which a watcher may undo to)."""
        keys = tuple(g.key for g in gangs)
        attempt = Attempt(self.action, keys, verdict, status or Status.success())
        for watcher in self._watchers:
            watcher(self, attempt, self.open, since)
        self.add(self.attempts, attempt)

    def failed_in(self, verdict: Verdict = Verdict.UNSCHEDULABLE) -> set[GangKey]:
        """The gangs a turn of this pass left with ``verdict``."""
        return {key for a in self.attempts if a.verdict is verdict for key in a.gangs}

    @contextlib.contextmanager
    def turn(self, unit: tuple[GangKey, ...], gangs: list[Gang]) -> Iterator[Statement]:
        """One GangGroup's turn in the running action, on a Statement of its own: the one
        record of what the turn changes (the ledger, the queues' room, the node finder's
        cursors, decisions, the gangs' outcomes). It is committed when the turn returns.
        Should it raise (a bug of ours, or input nobody foresaw), the Statement is discarded,
        which takes back what the turn had not committed, the error is recorded, and the
        other gangs go on: one bad gang must not stall the cluster."""
        statement = self.statement()
        statement.subscribe(self)
        outer, self.open = self.open, statement
        try:
            yield statement
        except Exception as error:  # isolation is the point: any error, one GangGroup
            statement.discard()
            self.open = outer
            what = f"{type(error).__name__}: {error}"
            self.errors.append(
                ActionError(
                    self.action,
                    tuple(unit),
                    what,
                    "".join(traceback.format_exception(error, limit=-8)),
                )
            )
            doing = f" ({self.action})" if self.action else ""
            message = (
                f"internal error while scheduling{doing} {', '.join(map(str, unit))}: "
                f"{what}; it is skipped (other gangs go on) and "
                "tried again after a backoff; please report this with the scheduler's log"
            )
            for gang in gangs:
                self.outcomes[gang.key].condition = ("False", REASON_UNSCHEDULABLE, message)
                self.failed_attempt(
                    gang, message, pods=pending(gang), reason=REASON_SCHEDULER_ERROR
                )
        else:
            statement.commit()
        finally:
            self.open = outer

    def statement(self, ledger: Ledger | None = None) -> Statement:
        """A Statement over ``ledger`` (a what-if's scratch; the pass's by default) whose
        undos put the node finder's cursors back where they stood at the mark undone to."""
        statement = Statement(ledger if ledger is not None else self.ledger)
        statement.subscribe(_Cursors(self))
        return statement

    # -- closing ------------------------------------------------------------------------------

    def _held_back(self, group: GroupBinding, why: str) -> None:
        message = f"internal error: {why}; nothing of the group is bound in this pass"
        for gang in group.gangs:
            ref = gang.bindings[0].pod
            pod = ObjectRef("Pod", ref.namespace, ref.name, ref.uid)
            self.add(self.events, Event(pod, WARNING, "FailedScheduling", message))

    @cached_property
    def claims_in_play(self) -> bool:
        """Any claim in the snapshot, or any pod with one: a walk over every member, made
        once a pass (the early binds and the claim writes both ask)."""
        return bool(self.devices.claims) or any(
            p.resource_claims for g in self.gangs.values() for p in g.members
        )

    def _claimed(self, groups: list[GroupBinding]) -> tuple[GroupBinding, ...]:
        """Each group with what its binds write to ResourceClaims first. A pod with claims
        and no plan for them (a path that placed it without its devices: a bug) is never
        bound: its whole group is held back, and says so."""
        if not self.claims_in_play:
            return tuple(groups)
        pods = {p.ref: p for g in self.gangs.values() for p in g.members}
        done: list[GroupBinding] = []
        for group in groups:
            made: dict[tuple[str, str], Allocation] = {}
            claims: dict[tuple[str, str], ResourceClaim] = {}
            reserve: dict[tuple[str, str], list[PodRef]] = {}
            broken = ""
            for binding in group.bindings:
                pod = pods.get(binding.pod)
                if pod is None or not pod.resource_claims:
                    continue
                plan = self.ledger.plan_of(binding.pod, binding.node)
                if plan is None:
                    broken = f"{binding.pod} has no devices planned on {binding.node}"
                    break
                made.update((claim.key, allocation) for claim, allocation in plan.allocate)
                for claim in plan.reserve:
                    claims[claim.key] = claim
                    reserve.setdefault(claim.key, []).append(binding.pod)
            if broken:
                self._held_back(group, broken)
                continue
            writes = tuple(
                ClaimWrite(
                    namespace=key[0],
                    name=key[1],
                    uid=claim.uid,
                    resource_version=claim.resource_version,
                    # What the pods rely on: made by this group's plan, or earlier in the pass
                    # (a held member's), or before it (a write still in flight included: the
                    # writer allocates it if the claim does not show it yet).
                    allocation=made.get(key) or claim.allocation or self.ledger.allocated(key),
                    pods=tuple(reserve[key]),
                )
                for key, claim in claims.items()
            )
            done.append(replace(group, claims=writes) if writes else group)
        return tuple(done)

    def result(self) -> Result:
        statuses: list[StatusUpdate] = []
        # Gangs the snapshot left out (settled, or parked) keep what was remembered of them;
        # a parked one must still be looked at when its flush or timeout falls due, a stale
        # one when its grace ends (#23).
        memory: dict[GangKey, GangState] = dict(self.snapshot.memory)
        for key, state in memory.items():
            if state.stale_due is not None:
                # Whether or not the pass got to it (a turn may end early: review of #23).
                self.wake(state.stale_due)
            if key in self.gangs:
                continue
            if state.parked_at is not None:
                self.wake(state.due_at)
        # The tree only where a gang states a tier: a flat one sorts every node.
        any_tiered = False
        for key, gang in self.gangs.items():
            outcome = self.outcomes[key]
            states_tier = tiered(gang)
            any_tiered = any_tiered or states_tier
            needs = tier_needs(gang, self.topology) if states_tier and not outcome.bindings else ()
            memory[key] = replace(outcome.state, condition=outcome.condition, tier_needs=needs)
            if gang.podgroup is None:
                continue
            status = desired_status(
                gang,
                binding_now={b.pod for b in outcome.bindings},
                first_attempt=outcome.state.first_attempt,
                timed_out=outcome.state.timed_out,
                condition=outcome.condition,
                below_min=outcome.below_min if outcome.state.satisfied else None,
                satisfied=outcome.state.satisfied,
                now=self.now,
                queue_held=gang.podgroup.api is PodGroupApi.VOLCANO
                and not outcome.bindings
                and self._held_by_queue(gang),
            )
            if status != gang.podgroup.status:
                statuses.append(StatusUpdate(key, status, gang.podgroup.api))
        return Result(
            bindings=self._claimed(self.bindings),
            pod_patches=tuple(self.patches),
            pod_conditions=tuple(self.conditions),
            # One eviction a pod: a stale gang's member may be a preemption's victim too.
            evictions=tuple({e.pod: e for e in reversed(self.evictions)}.values())[::-1],
            nominations=tuple(self.nominations),
            status_updates=tuple(statuses),
            events=tuple(self.events),
            memory=memory,
            wake_at=self.wake_at,
            queue_usage=self.queue_usage,
            attempts=tuple(a for a in self.attempts if a.verdict.tried),
            errors=tuple(self.errors),
            topology_notes=self.topology_notes,
            topology=self.topology if any_tiered else None,
        )
