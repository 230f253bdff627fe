"""One scheduling pass: a snapshot and the time in, decisions out. No I/O, no clock.

The pass works on GangGroups in queue order. Each is tried as a transaction on a scratch
ledger: every gang in it must place ``min_member`` members, or the scratch is dropped
(Strict) or kept as in-memory reservations that are never bound (NonStrict). A gang that has
been satisfied once (a member is bound) is done being a gang: its remaining members are
placed one by one like ordinary pods (Koordinator's "after gang").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from scheduler.core.arranging import Arranger, Tree, master_of, placement_tree, ranks, tree_order
from scheduler.core.gangs import gang_groups, priority_of, queue_key, resolve
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.core.statuses import desired_status
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import (
    NORMAL,
    WARNING,
    Binding,
    Event,
    GangBinding,
    ObjectRef,
    Placement,
    PodPatch,
    Result,
    StatusUpdate,
)
from scheduler.model.gangs import Gang
from scheduler.model.pods import TERMINAL_PHASES, GangKey, Mode, Pod, PodRef
from scheduler.model.resources import describe
from scheduler.model.snapshot import GangState, Snapshot
from scheduler.model.status import Status
from scheduler.model.times import parse_time
from scheduler.model.topology import Constraints, Topology, topology_from_labels

DEFAULT_CONFIG = Config()

# Condition reasons, as `kubectl describe pg` shows them.
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_WAITING = "Waiting"
REASON_TIMEOUT = "Timeout"
REASON_INVALID = "InvalidSpec"


@dataclass(slots=True)
class _Outcome:
    """What the pass decided about one gang, before it becomes events and status."""

    state: GangState
    condition: tuple[str, str, str] = ("False", REASON_WAITING, "not tried yet")
    bindings: list[Binding] = field(default_factory=list)
    relaxed: tuple[str, ...] = ()  # soft topology constraints the placement could not meet


def _pending(gang: Gang) -> list[Pod]:
    return [
        p for p in gang.members if not p.bound and not p.deleting and p.phase not in TERMINAL_PHASES
    ]


class _Pass:
    """The bookkeeping of one call to ``schedule``; it never outlives the call."""

    def __init__(self, snapshot: Snapshot, *, now: float, config: Config) -> None:
        self.snapshot = snapshot
        self.now = now
        self.config = config
        resolution = resolve(snapshot, config)
        self.gangs = {key: self._checked(gang) for key, gang in resolution.gangs.items()}
        self.missing_podgroups = resolution.missing_podgroups
        self.missing_groups = resolution.missing_groups
        self.topology_notes: tuple[str, ...] = ()
        self.ledger = Ledger.of(snapshot.nodes, snapshot.pods)
        self.outcomes: dict[GangKey, _Outcome] = {}
        self.events: list[Event] = []
        self.patches: list[PodPatch] = []
        self.bindings: list[GangBinding] = []
        self.attempts: list[tuple[GangKey, str]] = []
        self.wake_at: float | None = None
        for key, gang in self.gangs.items():
            state = snapshot.memory.get(key) or self._recovered_state(gang)
            if any(p.bound for p in gang.members):
                state = replace(state, satisfied=True, reservations={})
            self.outcomes[key] = _Outcome(state=state)
        self._hold_reservations()
        self.finder = NodeFinder(snapshot.nodes, self.ledger)

    # -- topology ---------------------------------------------------------------------------

    @cached_property
    def topology(self) -> Topology:
        """Only passes with a topology-placed gang build it (a flat tree sorts every node)."""
        return topology_of(self.snapshot, self.config)

    def _checked(self, gang: Gang) -> Gang:
        """A topology-placed gang whose constraints do not fit the topology is invalid."""
        if gang.constraints is None:
            return gang
        problems = gang.constraints.problems(levels=self.topology.levels, size=gang.total)
        return replace(gang, errors=(*gang.errors, *problems)) if problems else gang

    @cached_property
    def arranger(self) -> Arranger:
        """Built on first use: passes without topology-placed gangs never pay for it."""
        tree = Tree.of(self.topology, self.snapshot.nodes)
        self.topology_notes = tree.notes()
        return Arranger(tree, self.finder)

    # -- state ------------------------------------------------------------------------------

    def _recovered_state(self, gang: Gang) -> GangState:
        """After a restart: the first attempt is read back from the PodGroup's status."""
        start = gang.podgroup.status.schedule_start_time if gang.podgroup else ""
        return GangState(first_attempt=parse_time(start))

    def _hold_reservations(self) -> None:
        """Take NonStrict reservations from the ledger again, dropping the stale ones (and
        those of a gang whose time is up: its capacity is free in this very pass)."""
        for key, outcome in self.outcomes.items():
            held = outcome.state.reservations
            if not held or self._timed_out(self.gangs[key]):
                continue
            pending = {p.ref: p for p in _pending(self.gangs[key])}
            kept: dict[PodRef, str] = {}
            for ref, node in sorted(held.items()):
                pod = pending.get(ref)
                if pod is None or node not in self.snapshot.nodes:
                    continue
                if not self.ledger.fits(node, pod.requests):
                    continue
                self.ledger.take(node, pod.requests)
                kept[ref] = node
            outcome.state = replace(outcome.state, reservations=kept)

    def _wake(self, at: float) -> None:
        if at > self.now and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at

    # -- events -----------------------------------------------------------------------------

    def _say(
        self, gang: Gang, *, reason: str, message: str, pods: Iterable[Pod], warning: bool = True
    ) -> None:
        """Event on the gang's pods and PodGroup, once per distinct message."""
        outcome = self.outcomes[gang.key]
        if outcome.state.last_message == message:
            return
        outcome.state = replace(outcome.state, last_message=message)
        kind = WARNING if warning else NORMAL
        if gang.podgroup is not None:
            pg = gang.podgroup
            self.events.append(
                Event(
                    ObjectRef("PodGroup", pg.key.namespace, pg.key.name, pg.uid),
                    kind,
                    reason,
                    message,
                )
            )
        for pod in pods:
            ref = ObjectRef("Pod", pod.ref.namespace, pod.ref.name, pod.ref.uid)
            self.events.append(Event(ref, kind, reason, message))

    # -- the pass ---------------------------------------------------------------------------

    def run(self) -> Result:
        units = gang_groups(self.gangs)
        classes = self.snapshot.priority_classes

        def unit_order(unit: tuple[GangKey, ...]) -> tuple:
            return min(queue_key(self.gangs[k], classes) for k in unit if k in self.gangs)

        for unit in sorted(units, key=unit_order):
            present = [self.gangs[k] for k in unit if k in self.gangs]
            self._isolated(unit, present)
        return self._result()

    def _isolated(self, unit: tuple[GangKey, ...], present: list[Gang]) -> None:
        """One GangGroup's turn. Should it raise (a bug of ours, or input nobody foresaw),
        its decisions are taken back whole and the other gangs go on: one bad gang must not
        stall the cluster. Capacity it took stays taken for this pass (never over-commit)."""
        # What a turn changes, kept cheaply (this runs for every gang every pass; the bindings
        # list is empty before a gang's turn, so its copy costs nothing).
        saved = [
            (o, o.state, o.condition, o.bindings[:], o.relaxed)
            for o in (self.outcomes[g.key] for g in present)
        ]
        bound_before = len(self.bindings)
        attempts_before = len(self.attempts)
        try:
            if all(self.outcomes[g.key].state.satisfied for g in present):
                for gang in present:
                    self._place_after_gang(gang)
            else:
                self._try_unit(unit, present)
        except Exception as error:  # isolation is the point: any error, one GangGroup
            del self.bindings[bound_before:]
            del self.attempts[attempts_before:]
            for outcome, state, condition, bindings, relaxed in saved:
                outcome.state, outcome.condition, outcome.relaxed = state, condition, relaxed
                outcome.bindings = (
                    bindings  # the turn may have replaced the list, not only grown it
                )
            self.finder.rewind()
            message = (
                f"internal error while scheduling {', '.join(map(str, unit))}: "
                f"{type(error).__name__}: {error}; it is skipped (other gangs go on) and "
                "tried again after a backoff; please report this with the scheduler's log"
            )
            for gang in present:
                self.outcomes[gang.key].condition = ("False", REASON_UNSCHEDULABLE, message)
                self._failed_attempt(gang, message, pods=_pending(gang))

    def _place_after_gang(self, gang: Gang) -> None:
        outcome = self.outcomes[gang.key]
        members = sum(1 for p in gang.members if p.bound)
        outcome.condition = (
            "True",
            REASON_SCHEDULED,
            f"{members} of {gang.min_member} members bound",
        )
        pending = self._ordered(_pending(gang))
        if not pending:
            return
        if self.now < outcome.state.retry_at:
            self._wake(outcome.state.retry_at)
            return
        failures: list[str] = []
        for pod in pending:
            node = self.finder.find(pod, self.ledger)
            if node is None:
                failures.append(f"{pod.ref.name}: {self.finder.explain(pod, self.ledger).message}")
                continue
            self.ledger.take(node, pod.requests)
            outcome.bindings.append(Binding(pod.ref, node))
        if outcome.bindings:
            self.bindings.append(
                GangBinding(gang.key, tuple(outcome.bindings), all_or_nothing=False)
            )
        if failures:
            placed = {b.pod for b in outcome.bindings}
            unplaced = [p for p in pending if p.ref not in placed]
            self._failed_attempt(gang, "; ".join(failures), pods=unplaced)

    def _ordered(self, pods: list[Pod]) -> list[Pod]:
        classes = self.snapshot.priority_classes
        return sorted(pods, key=lambda p: (-priority_of(p, classes), p.created, p.ref))

    def _failed_attempt(self, gang: Gang, message: str, *, pods: Iterable[Pod]) -> None:
        outcome = self.outcomes[gang.key]
        attempts = outcome.state.attempts + 1
        retry_at = self.now + self.config.backoff(attempts)
        outcome.state = replace(outcome.state, attempts=attempts, retry_at=retry_at)
        self._wake(retry_at)
        self._say(gang, reason="FailedScheduling", message=message, pods=pods)

    def _try_unit(self, unit: tuple[GangKey, ...], gangs: list[Gang]) -> None:
        # A timed-out gang stays so, and takes its GangGroup with it.
        expired = [g for g in gangs if self._timed_out(g)]
        if expired:
            for gang in gangs:
                self._time_out(gang, because=expired[0])
            return
        if self._why_not_ready(unit, gangs) is not None:
            return
        retry_at = max(self.outcomes[g.key].state.retry_at for g in gangs)
        if self.now < retry_at:
            self._wake(retry_at)
            return
        self._attempt(gangs)

    def _timed_out(self, gang: Gang) -> bool:
        state = self.outcomes[gang.key].state
        if state.timed_out or any(p.timed_out for p in _pending(gang)):
            return True
        if state.first_attempt is None or state.satisfied:
            return False
        deadline = state.first_attempt + gang.timeout_seconds
        if self.now >= deadline:
            return True
        self._wake(deadline)
        return False

    def _time_out(self, gang: Gang, *, because: Gang) -> None:
        outcome = self.outcomes[gang.key]
        pending = _pending(gang)
        if because is gang:
            message = (
                f"gang {gang.key} was not placed within {gang.timeout_seconds:g}s of its first "
                f"attempt; its pods are marked {names.KOORD_TIMEOUT}=true and will not be tried "
                "again: delete them (or the PodGroup) and create them anew to retry"
            )
        else:
            message = f"gang {because.key} of the same GangGroup timed out, so this gang did too"
        outcome.state = replace(outcome.state, timed_out=True, reservations={})
        outcome.condition = ("False", REASON_TIMEOUT, message)
        self.patches.extend(
            PodPatch(p.ref, {names.KOORD_TIMEOUT: "true"}) for p in pending if not p.timed_out
        )
        self._say(gang, reason="GangTimeout", message=message, pods=pending)

    def _blocker(self, gang: Gang) -> tuple[str, str, str] | None:
        """What stops ``gang`` from being tried, as (condition reason, event reason, message),
        or None: its spec is invalid, or something it names does not exist (yet)."""
        if gang.errors:
            return (
                REASON_INVALID,
                "InvalidGangSpec",
                f"gang {gang.key} is not scheduled: " + "; ".join(gang.errors),
            )
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
        if gang.key in self.missing_podgroups:
            return (
                REASON_WAITING,
                "PodGroupNotFound",
                f"waiting for PodGroup {gang.key}, which does not exist: create it, or give "
                f"the pods the annotation {names.KOORD_MIN_AVAILABLE}",
            )
        return None

    def _why_not_ready(self, unit: tuple[GangKey, ...], gangs: list[Gang]) -> str | None:
        """Say (once) why the GangGroup cannot be tried yet; None if it can."""
        for gang in gangs:
            blocked = self._blocker(gang)
            if blocked is not None:
                condition, event, message = blocked
                self.outcomes[gang.key].condition = ("False", condition, message)
                self._say(gang, reason=event, message=message, pods=_pending(gang))
                return message
        for gang in gangs:
            missing = [k for k in unit if k not in self.gangs]
            if missing:
                message = (
                    f"waiting for gang {missing[0]} of the same GangGroup, which has no pods yet"
                )
                condition = message
            elif len(_pending(gang)) + len(self.outcomes[gang.key].state.reservations) < gang.total:
                have = len(_pending(gang))
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
                self.outcomes[other.key].condition = ("False", REASON_WAITING, condition)
                self._say(
                    other,
                    reason="GangWaiting",
                    message=message,
                    pods=_pending(other),
                    warning=False,
                )
            return message
        return None

    def _attempt(self, gangs: list[Gang]) -> None:
        """Try the whole GangGroup on a scratch ledger; commit it whole or not at all."""
        scratch = self.ledger.scratch()
        placed: dict[GangKey, list[Binding]] = {}
        short: dict[GangKey, Status] = {}  # why a gang fell short of min_member
        for gang in gangs:
            outcome = self.outcomes[gang.key]
            if outcome.state.first_attempt is None:
                outcome.state = replace(outcome.state, first_attempt=self.now)
            placed[gang.key], status = self._place_gang(gang, scratch)
            if not status.ok:
                short[gang.key] = status
        if short:
            self.attempts.extend((g.key, "unschedulable") for g in gangs)
            self._unit_failed(gangs, placed, scratch, short)
            return
        self.attempts.extend((g.key, "scheduled") for g in gangs)
        scratch.commit()
        for gang in gangs:
            outcome = self.outcomes[gang.key]
            retries = outcome.state.attempts + 1
            held = [Binding(ref, node) for ref, node in sorted(outcome.state.reservations.items())]
            outcome.bindings = held + placed[gang.key]
            outcome.state = replace(
                outcome.state,
                satisfied=True,
                reservations={},
                attempts=0,
                retry_at=0.0,
                last_message="",
            )
            count = len(outcome.bindings)
            outcome.condition = (
                "True",
                REASON_SCHEDULED,
                f"{count} of {gang.min_member} members bound",
            )
            placement = (
                self._placement(gang, outcome.bindings, retries) if gang.topology_placed else None
            )
            self.bindings.append(
                GangBinding(
                    gang.key, tuple(outcome.bindings), all_or_nothing=True, placement=placement
                )
            )
            if outcome.relaxed:
                self._say(
                    gang,
                    reason="TopologyRelaxed",
                    message=f"gang {gang.key} placed with soft constraints not met: "
                    + "; ".join(outcome.relaxed),
                    pods=_pending(gang),
                    warning=False,
                )

    def _place_gang(self, gang: Gang, scratch: Ledger) -> tuple[list[Binding], Status]:
        """Place as many pending members as fit (min_member at least, or it falls short)."""
        status = self._enough_in_total(gang)
        if not status.ok:
            return [], status
        if gang.topology_placed:
            return self._arrange_gang(gang, scratch)
        held = self.outcomes[gang.key].state.reservations
        need = gang.min_member - len(held)
        members = [p for p in self._ordered(_pending(gang)) if p.ref not in held]
        got: list[Binding] = []
        first_miss: Status | None = None
        for i, pod in enumerate(members):
            if gang.mode is Mode.STRICT and len(got) + (len(members) - i) < need:
                break  # min_member is out of reach: stop early
            node = self.finder.find(pod, scratch)
            if node is None:
                if first_miss is None and len(got) < need:
                    detail = self.finder.explain(pod, scratch).message
                    first_miss = Status.unschedulable(f"{pod.ref.name}: {detail}")
                continue
            scratch.take(node, pod.requests)
            got.append(Binding(pod.ref, node))
        if len(got) >= need:
            return got, Status.success()
        return got, first_miss or Status.unschedulable(f"only {len(got)} of {need} members fit")

    def _arrange_gang(self, gang: Gang, scratch: Ledger) -> tuple[list[Binding], Status]:
        """The whole gang in one go by the topology solver: every pending member, else the
        first min_member of them (the master first, then in name order)."""
        pending = _pending(gang)
        if not pending:
            return [], Status.success()
        master = master_of(p.ref for p in pending)
        members = sorted(pending, key=lambda p: (p.ref != master, tree_order(p.ref.name)))
        constraints = gang.constraints or Constraints()
        tries = [members]
        if gang.min_member < len(members):
            tries.append(members[: gang.min_member])
        status = Status.success()
        for chosen in tries:
            trial = scratch.scratch()
            arrangement = self.arranger.arrange(chosen, constraints=constraints, ledger=trial)
            status = arrangement.status
            if status.ok:
                trial.commit()
                self.outcomes[gang.key].relaxed = arrangement.relaxed
                return [Binding(p.ref, node) for p, node in arrangement.placements], status
        return [], status

    def _placement(self, gang: Gang, bindings: list[Binding], retries: int) -> Placement:
        pairs = [(b.pod, b.node) for b in bindings]
        group = gang.sakkara
        return Placement(
            ranks=tuple(ranks(pairs, self.topology)),
            tree=json.dumps(placement_tree(pairs, self.topology)),
            retries=retries,
            begin=min(p.created for p in gang.members),
            group=(group.namespace, group.configmap) if group else None,
            podgroup=gang.key if gang.podgroup is not None else None,
        )

    def _enough_in_total(self, gang: Gang) -> Status:
        """minResources: a cheap check of the whole gang against the whole cluster."""
        if not gang.min_resources:
            return Status.success()
        free: dict[str, int] = {}
        for name, node in self.snapshot.nodes.items():
            if node.ready and not node.unschedulable:
                for resource, amount in self.ledger.free(name).items():
                    free[resource] = free.get(resource, 0) + max(amount, 0)
        short = gang.min_resources.shortfalls(free)
        if not short:
            return Status.success()
        wanted = {r: gang.min_resources[r] for r in short}
        have = {r: free.get(r, 0) for r in short}
        return Status.unschedulable(
            f"PodGroup minResources needs {describe(wanted)} in total; "
            f"the cluster has {describe(have)} free"
        )

    def _unit_failed(
        self,
        gangs: list[Gang],
        placed: Mapping[GangKey, list[Binding]],
        scratch: Ledger,
        short: Mapping[GangKey, Status],
    ) -> None:
        first_short = next(g for g in gangs if g.key in short)
        why = (
            f"{first_short.key}: {short[first_short.key].message}"
            if len(gangs) > 1
            else (short[first_short.key].message)
        )
        if all(g.mode is Mode.NON_STRICT for g in gangs):
            # NonStrict: keep what was placed as reservations, in memory, never bound.
            scratch.commit()
            for gang in gangs:
                outcome = self.outcomes[gang.key]
                held = dict(outcome.state.reservations)
                held.update({b.pod: b.node for b in placed[gang.key]})
                outcome.state = replace(outcome.state, reservations=held)
                message = (
                    f"gang {gang.key} holds {len(held)} of {gang.min_member} members (NonStrict) "
                    f"and waits for the rest; {why}"
                )
                outcome.condition = ("False", REASON_UNSCHEDULABLE, message)
                self._failed_attempt(
                    gang, message, pods=[p for p in _pending(gang) if p.ref not in held]
                )
            return
        self.finder.rewind()  # the scratch is dropped: its capacity is free again
        group = ", ".join(str(g.key) for g in gangs)
        for gang in gangs:
            outcome = self.outcomes[gang.key]
            subject = f"gang {gang.key}" if len(gangs) == 1 else f"GangGroup [{group}]"
            message = f"{subject} does not fit, nothing was bound; {why}"
            outcome.state = replace(outcome.state, reservations={})
            outcome.condition = ("False", REASON_UNSCHEDULABLE, message)
            self._failed_attempt(gang, message, pods=_pending(gang))

    # -- result -----------------------------------------------------------------------------

    def _result(self) -> Result:
        statuses: list[StatusUpdate] = []
        memory: dict[GangKey, GangState] = {}
        for key, gang in self.gangs.items():
            outcome = self.outcomes[key]
            memory[key] = outcome.state
            if gang.podgroup is None:
                continue
            status = desired_status(
                gang,
                binding_now={b.pod for b in outcome.bindings},
                first_attempt=outcome.state.first_attempt,
                timed_out=outcome.state.timed_out,
                condition=outcome.condition,
                now=self.now,
            )
            if status != gang.podgroup.status:
                statuses.append(StatusUpdate(key, status))
        return Result(
            bindings=tuple(self.bindings),
            pod_patches=tuple(self.patches),
            status_updates=tuple(statuses),
            events=tuple(self.events),
            memory=memory,
            wake_at=self.wake_at,
            attempts=tuple(self.attempts),
            topology_notes=self.topology_notes,
        )


def topology_of(snapshot: Snapshot, config: Config) -> Topology:
    """The tree this pass places on: the topology ConfigMap's, else one from node labels
    (--topology-from-labels), else flat (root and nodes)."""
    if snapshot.topology is not None:
        return snapshot.topology
    if config.topology_labels:
        labels = {n.name: n.labels for n in snapshot.nodes.values()}
        return topology_from_labels(config.topology_labels, labels)
    return Topology.flat(sorted(snapshot.nodes))


def schedule(snapshot: Snapshot, *, now: float, config: Config = DEFAULT_CONFIG) -> Result:
    """Decide one pass. Same snapshot, same ``now``: same result."""
    return _Pass(snapshot, now=now, config=config).run()


def after_failed_bind(
    state: GangState, *, message: str, now: float, config: Config = DEFAULT_CONFIG
) -> GangState:
    """The gang's state once the first bind of a not-yet-satisfied gang was rejected.

    Nothing of the gang is bound, so it is a gang again: tried whole, after a backoff.
    """
    attempts = state.attempts + 1
    return replace(
        state,
        satisfied=False,
        attempts=attempts,
        retry_at=now + config.backoff(attempts),
        last_message=message,
    )
