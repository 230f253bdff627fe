"""A Session: one pass over an immutable snapshot, and the state its actions share.

Opening a session resolves the gangs, restores each gang incarnation's memory
(``incarnations``), builds the ledger of free capacity and takes back the room held from
before. Actions (``core/actions/``) then walk the GangGroups in queue order, each turn on a
Statement of its own (``turn``), and share what the session's parts know, each a job of its
own: ``order`` (which GangGroup next), ``queues`` (the queues' book and room),
``readiness`` (whether a gang may be tried), ``parking`` (whether it is worth trying again)
and ``reporting`` (what is said). Closing the session (``closing``) turns what was decided
into a ``Result``. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from functools import cached_property

from scheduler.core.arranging import Arranger, Tree
from scheduler.core.claiming import DeviceWorld, no_selectors
from scheduler.core.filtering import volume_terms
from scheduler.core.gangs import resolve, topology_of
from scheduler.core.neighbouring import Neighbours
from scheduler.core.placing import Cursors, Ledger, NodeFinder
from scheduler.core.session import closing, incarnations
from scheduler.core.session.ordering import Order
from scheduler.core.session.outcomes import (
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    Outcome,
    pending,
)
from scheduler.core.session.parking import Parking
from scheduler.core.session.queues import Queues
from scheduler.core.session.readiness import Readiness
from scheduler.core.session.reporting import Reporting
from scheduler.core.statement import Kind, Operation, Statement
from scheduler.core.statuses import NOT_TRIED
from scheduler.core.volume_binding import Capacities, VolumeWorld
from scheduler.core.volume_restrictions import ExclusiveClaims
from scheduler.model.config import Config
from scheduler.model.decisions import (
    ActionError,
    Attempt,
    Event,
    Eviction,
    GroupBinding,
    Nomination,
    PodCondition,
    PodPatch,
    Result,
    Verdict,
    VictimChoice,
)
from scheduler.model.devices import Consumer, group_consumer
from scheduler.model.gangs import Gang
from scheduler.model.pods import GangKey, PodGroupApi, PodRef
from scheduler.model.snapshot import Snapshot
from scheduler.model.status import Status
from scheduler.model.topology import Topology

# Told what came of each turn, in the turn (``Session.watch``): the session, the record, the
# open Statement (None outside a turn) and the mark where the turn's work for it began.
Watcher = Callable[["Session", Attempt, "Statement | None", int], None]
# Runs as a turn opens, on its Statement; what it returns (if anything) runs as the turn's
# work ends, on the same Statement, before it is committed (``Session.around_turns``).
Opener = Callable[["Session", "Statement", list[Gang]], "Callable[[], None] | None"]


class _Cursors:
    """The node finder's cursors at each mark of a turn's Statement, as its listener: when
    what followed a mark is undone, the ledger is as it was then, and so must the cursors
    be (they move past nodes without room, assuming room only shrinks). Marks at one
    position are kept in order, each with the fence it was taken in: an undo restores the
    last taken in the fence in use, else starts the cursors over."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._at: dict[int, list[Cursors]] = {}

    def marked(self, mark: int) -> None:
        finder = self._session.__dict__.get("finder")
        if finder is None:
            return
        here = self._at.get(mark)
        if here and here[-1].moves == finder.moves and here[-1].context == finder.context:
            return  # the cursors have not moved since the last mark here
        self._at.setdefault(mark, []).append(finder.mark())

    def committed(self, ops: tuple[Operation, ...]) -> None:
        self._at.clear()  # a new record begins, at a new first mark

    def undone_to(self, mark: int) -> None:
        for later in [at for at in self._at if at > mark]:
            del self._at[later]
        finder = self._session.__dict__.get("finder")
        if finder is None:
            return
        context = finder.context
        kept = (m for at in sorted(self._at, reverse=True) for m in reversed(self._at[at]))
        finder.restore(next((m for m in kept if m.context == context), None))


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
        self.missing_composites = resolution.missing_composites
        self.topology_notes: tuple[str, ...] = ()
        self.infos = snapshot.infos()  # worked out from the pods, when the cache gave none
        self.devices = self._device_world()
        self.ledger = Ledger.over(
            snapshot.nodes,
            self.infos,
            devices=self.devices,
            volumes=VolumeWorld(
                claims=snapshot.claims,
                volumes=snapshot.volumes,
                classes=snapshot.storage_classes,
                csi_nodes=snapshot.csi_nodes,
                attachments=snapshot.volume_attachments,
                capacities=Capacities(snapshot.csi_drivers, snapshot.storage_capacities),
            )
            if config.bind_volumes
            else None,
            exclusive=ExclusiveClaims.of(
                snapshot.claims,
                self.infos,
                placing=(p for g in self.gangs.values() for p in g.members if not p.bound),
            ),
        )
        self.order = Order(self)
        self.queues = Queues(self)
        self.readiness = Readiness(self)
        self.parking = Parking(self)
        self.reporting = Reporting(self)
        # What the pass decided, each list appended to by ``add`` (undone with a turn).
        self.outcomes: dict[GangKey, Outcome] = {}
        self.events: list[Event] = []
        self.patches: list[PodPatch] = []
        self.conditions: list[PodCondition] = []
        self.evictions: list[Eviction] = []
        self.victim_choices: list[VictimChoice] = []
        self.nominations: list[Nomination] = []
        self.bindings: list[GroupBinding] = []
        # The room held in this pass for preemptors' nominated members, by gang: preemption
        # gives a gang's own holds back before it looks for victims again.
        self.nominated_holds: dict[GangKey, dict[PodRef, str]] = {}
        # What came of each GangGroup's turns, action by action (``attempted``), and the
        # turns that raised.
        self.attempts: list[Attempt] = []
        self.errors: list[ActionError] = []
        self.action = ""  # the action running now (``framework.run_actions``)
        # False inside a what-if whose placements are weighed and dropped (a victim search):
        # nobody reads why a member did not fit there, and saying it (every node's reason,
        # devices tried on each) took a third of a preemption for devices.
        self.explaining = True
        self.open: Statement | None = None  # the Statement of the turn open now
        self._watchers: list[tuple[Watcher, frozenset[Verdict]]] = []
        self._openers: list[Opener] = []
        self._uncounted: list[GroupBinding] = []  # committed in the open turn
        self.wake_at: float | None = None
        self._domains: dict[str, Mapping[tuple[str, ...], frozenset[str]]] = {}
        for key, gang in self.gangs.items():
            state = incarnations.incarnation(self, gang, snapshot.memory.get(key))
            self.outcomes[key] = Outcome(
                state=state, condition=state.condition or NOT_TRIED, session=self
            )
        incarnations.hold_reservations(self)
        # Told each GangGroup's binds as its turn commits them (``schedule``'s ``committed``),
        # unless claims are in play: their writes are worked out when the session closes.
        self._committed = committed if committed and not self.claims_in_play else None

    @cached_property
    def claims_in_play(self) -> bool:
        """Any claim in the snapshot, or any pod with one: a walk over every member, made
        once a pass and only when asked (the early binds and the claim writes ask)."""
        return closing.claims_in_play(self)

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
            shared=self._shared_claims(),
        )

    def _shared_claims(self) -> dict[tuple[str, tuple[str, str]], Consumer]:
        """The claims upstream PodGroups share among their members (spec.resourceClaims),
        by member and the claim its entry names: reserved for the group."""
        shared: dict[tuple[str, tuple[str, str]], Consumer] = {}
        for gang in self.gangs.values():
            podgroup = gang.podgroup
            if podgroup is None or not podgroup.claims or podgroup.api is not PodGroupApi.WORKLOAD:
                continue
            group = group_consumer(podgroup.key.name, podgroup.uid)
            for pod in gang.members:
                for entry in pod.resource_claims:
                    if entry.claim and podgroup.shares(entry):
                        shared[(pod.ref.uid, (pod.ref.namespace, entry.claim))] = group
        return shared

    @cached_property
    def topology(self) -> Topology:
        """Only passes with a topology-placed gang build it (a flat tree sorts every node)."""
        return topology_of(self.snapshot, self.config)

    def domains(self, level: str) -> Mapping[tuple[str, ...], frozenset[str]]:
        """The units of ``level`` and their nodes, built once a pass (a gang's
        networkTopology keeps it inside one of them). A unit is its path from the top:
        racks of the same name in two zones are two units."""
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
            turn.decide(into, start, items)

    def done(self, op: Operation) -> None:
        if op.kind is Kind.EVICT or op.kind is Kind.RELEASE:
            # Room came back (a victim's, or held room given back to a turn): a shape that
            # failed earlier in the pass may fit now.
            self.parking.failed_shapes.clear()
        if op.kind is Kind.RELEASE:
            # The node finder's cursors pass only nodes without room, as room only shrinks
            # in a pass; held room given back makes it grow: they start over.
            self.finder.restore()

    def committed(self, ops: tuple[Operation, ...]) -> None:
        """The bindings a commit keeps are final: the shell may start binding them. They
        count against their queues once the turn is over (the turn's own room counts them
        until then, and the next group is chosen with them counted)."""
        groups = [
            group
            for op in ops
            if op.kind is Kind.DECIDE and op.what[0] is self.bindings
            for group in op.what[2]
        ]
        if not groups:
            return
        self._uncounted.extend(groups)
        if self._committed is not None:
            for group in groups:
                self._committed(group)

    def _count_committed(self) -> None:
        """Count the bindings the turn kept against their queues (nominated members were
        counted when nominated)."""
        groups, self._uncounted = self._uncounted, []
        book = self.queues.book if groups else None
        if book is None:
            return
        counted = self.queues.counted_refs
        for group in groups:
            for placed in group.gangs:
                gang = self.gangs.get(placed.gang)
                if gang is None:
                    continue
                requests = {p.ref: self.queues.amounts(p) for p in gang.members}
                for binding in placed.bindings:
                    if binding.pod not in counted:
                        book.take(gang.queue, requests.get(binding.pod, {}))

    def wake(self, at: float) -> None:
        if at > self.now and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at

    def around_turns(self, opener: Opener) -> None:
        """Call ``opener`` as every turn opens, and what it returns as the turn's work
        ends: a change it makes for the turn alone (room set aside for the gangs of the
        turn) and takes back after it, both on the turn's Statement."""
        self._openers.append(opener)

    def watch(self, watcher: Watcher, *, verdicts: Collection[Verdict]) -> None:
        """Tell ``watcher`` what came of every turn with one of ``verdicts`` from now on
        (``attempted``)."""
        self._watchers.append((watcher, frozenset(verdicts)))

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
        watchers = [watcher for watcher, verdicts in self._watchers if verdict in verdicts]
        if verdict is Verdict.RUNNING and not watchers:
            return  # a running gang's turn is no attempt: only a watcher may want it
        keys = tuple(g.key for g in gangs)
        attempt = Attempt(self.action, keys, verdict, status or Status.success())
        for watcher in watchers:
            watcher(self, attempt, self.open, since)
        if verdict is not Verdict.RUNNING:
            self.add(self.attempts, attempt)

    def failed_in(self, verdict: Verdict = Verdict.UNSCHEDULABLE) -> set[GangKey]:
        """The gangs a turn of this pass left with ``verdict``."""
        return {key for a in self.attempts if a.verdict is verdict for key in a.gangs}

    def preemptors(self, unit: tuple[GangKey, ...], failed: set[GangKey]) -> list[Gang]:
        """The gangs of a GangGroup an action that makes room (preempt, reclaim) acts for:
        every gang of it, if each failed for want of room, else none; of a CompositePodGroup
        hierarchy, whose parts placed count toward its quorum, those that failed. None if a
        pod of them, or its PodGroup, says preemptionPolicy: Never."""
        gangs = [self.gangs[k] for k in unit if k in self.gangs]
        if gangs and gangs[0].quorum is not None:
            gangs = [g for g in gangs if g.key in failed]
        if not gangs or not all(g.key in failed for g in gangs):
            return []
        if any(g.podgroup is not None and not g.podgroup.preempts for g in gangs):
            return []
        if any(not p.preempts for g in gangs for p in pending(g)):
            return []
        return gangs

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
            closers = [c for opener in self._openers if (c := opener(self, statement, gangs))]
            yield statement
            for closer in closers:
                closer()
        except Exception as error:  # isolation is the point: any error, one GangGroup
            statement.discard()
            self.open = outer
            self.failed(unit, gangs, error)
        else:
            statement.commit()
        finally:
            self.open = outer
            self._count_committed()  # what it committed, before an error too, is final

    def failed(self, unit: tuple[GangKey, ...], gangs: list[Gang], error: Exception) -> None:
        """What a turn that raised leaves: the error recorded (the action, the gangs, the
        trace), and the gangs told, to be tried again after a backoff."""
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
            self.reporting.failed_attempt(
                gang, message, pods=pending(gang), reason=REASON_SCHEDULER_ERROR
            )

    def statement(self, ledger: Ledger | None = None) -> Statement:
        """A Statement over ``ledger`` (a what-if's scratch; the pass's by default) whose
        undos put the node finder's cursors back where they stood at the mark undone to."""
        statement = Statement(ledger if ledger is not None else self.ledger)
        statement.subscribe(_Cursors(self))
        return statement

    def result(self) -> Result:
        """What the pass decided, as data for the shell."""
        return closing.close(self)

    def close(self) -> None:
        """Let go of everything the pass held. Its parts and its gangs' outcomes point back
        at it, a cycle only the cyclic collector frees; under the shell's collector
        thresholds (few collections of the older generations) such a cycle outlived many
        passes, each holding its whole snapshot: memory grew all day."""
        self.__dict__.clear()
