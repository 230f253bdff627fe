"""Each gang's memory, restored as a session opens: which incarnation it is, what it
remembered (after a restart, read back from the API server), and the room held for it from
before (NonStrict holds, a preemptor's nominations)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from scheduler.core.filtering import volume_terms
from scheduler.core.session.outcomes import NOMINATION_SECONDS, of_timeout, pending, present
from scheduler.core.statuses import PENDING_PHASE, SCHEDULING_PHASE
from scheduler.model.decisions import Nomination
from scheduler.model.gangs import Gang
from scheduler.model.pods import Mode, Pod, PodGroupApi, PodRef
from scheduler.model.snapshot import GangState
from scheduler.model.times import parse_time

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session


def incarnation(session: Session, gang: Gang, remembered: GangState | None) -> GangState:
    """The state of the gang's current incarnation: what the last pass remembered, if it
    was about these very objects and that incarnation still goes on; else a fresh one."""
    uids = frozenset(p.ref.uid for p in gang.members)
    podgroup_uid = gang.podgroup.uid if gang.podgroup else ""
    # Satisfied only by a bind the API server confirmed: an assumed one may yet be
    # rejected, and with it the whole group (see in_flight).
    flying = session.snapshot.in_flight
    # Or enough of its members completed (Succeeded): the rest join them one by one,
    # unless something stops the gang from being tried at all (an invalid gang, a
    # PodGroup or owner that does not exist must say so, not bind).
    # A member this scheduler marked for eviction, or chose to evict or move in a pass whose
    # writes the cache has not seen yet, keeps nothing running: it is going, and a gang of
    # which only such members run starts anew, whole, not one member at a time.
    ours = session.config.scheduler_names
    leaving = session.snapshot.leaving
    live = any(
        p.bound
        and p.alive
        and p.ref.uid not in flying
        and p.ref.uid not in leaving
        and not (p.disrupted is not None and p.disrupted.by in ours)
        for p in gang.members
    ) or (gang.need == 0 and bool(pending(gang)) and session.readiness.blocker(gang) is None)
    todo = pending(gang)
    state = remembered
    if state is not None and (
        state.podgroup_uid != podgroup_uid or (state.members and not state.members & uids)
    ):
        state = None  # a PodGroup or pods created anew under the same name
    if state is None:
        state = recovered_state(session, gang)
    elif state.satisfied and not live and not session.readiness.in_flight(gang):
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
    # (else an after-gang bind in flight that fails once the last bound member has gone
    # would time the gang out on the old incarnation's clock).
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


def recovered_state(session: Session, gang: Gang) -> GangState:
    """After a restart (or the first sight of a gang): the first attempt is read back from
    the PodGroup's status while it says the gang is still being scheduled, else from the
    members' first-attempt annotation, but only when every pending member carries it (a
    member without it belongs to a later incarnation: an old mark must not time it out;
    a clock started late is the lesser harm). A preemptor's nomination comes back from
    its members' ``status.nominatedNodeName``, so the room its victims freed is still held
    for it after a restart or a failover (kube-scheduler reads them back too), with a
    fresh ``NOMINATION_SECONDS``."""
    nominated = {p.ref: p.nominated_node for p in pending(gang) if p.nominated_node}
    since = session.now if nominated else None
    # Its victims are not known any more: the pods being deleted where it was nominated
    # are what it waits for.
    infos = session.infos if nominated else {}
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
    return GangState(first_attempt=first, nominated=nominated, nominated_at=since, victims=victims)


def hold_reservations(session: Session) -> None:
    """Drop the NonStrict holds that are stale (their pod or node gone). They are not
    taken from the ledger here: each gang takes its holds again at its own turn, in
    queue order, so a gang ahead of it (higher priority, or older) may have their room
    first (``allocate.keep_holds``). Preemptors' nominations are held before any turn."""
    for key, outcome in session.outcomes.items():
        held = outcome.state.reservations
        if not held or outcome.state.nominated:
            continue
        nodes = session.snapshot.nodes
        gang = session.gangs.get(key)
        # A gang no longer NonStrict (its mode changed, or a subGroupPolicy made it
        # Strict) keeps no holds: they are taken again only by keep_holds, and a hold
        # not taken again must never be bound (it would over-commit its node).
        strict = gang is None or gang.mode is not Mode.NON_STRICT
        kept = {} if strict else {ref: node for ref, node in held.items() if node in nodes}
        if kept != held:
            outcome.state = replace(outcome.state, reservations=kept)
    hold_nominations(session)


def _without_nomination(state: GangState) -> GangState:
    """The gang's memory once the room its preemption freed is no longer held for it."""
    return replace(state, nominated={}, victims=frozenset(), nominated_at=None, reservations={})


def hold_nominations(session: Session) -> None:
    """A preemptor's room, as its victims leave: each nominated member whose node has
    room again holds it (as a reservation: taken before any other gang's turn, so no
    gang of lower priority takes what was freed for it; never bound until the whole gang
    fits). A nomination lapses after ``NOMINATION_SECONDS`` without a bind."""
    for key, outcome in session.outcomes.items():
        state = outcome.state
        if not state.nominated:
            continue
        gang = session.gangs[key]
        if state.satisfied:
            # Satisfied meanwhile (a rival bound a member): its other members go one by one
            # where they fit, and room held for them would only stand in their own way.
            waiting = {p.ref for p in pending(gang)}
            session.add(
                session.nominations,
                *(Nomination(ref, "") for ref in state.nominated if ref in waiting),
            )
            outcome.state = _without_nomination(state)
            continue
        have = present(gang)
        if have < gang.total:
            # Short of members since (one deleted while its victims left): it is not tried
            # until the rest exist, and room held for it would stand idle meanwhile.
            session.reporting.say(
                gang,
                reason="HoldReleased",
                message=(
                    f"gang {key} has {have} of its {gang.total} members: the room held for "
                    "it since its preemption is released until they all exist"
                ),
                pods=pending(gang),
                warning=False,
            )
            session.add(session.nominations, *(Nomination(ref, "") for ref in state.nominated))
            outcome.state = _without_nomination(state)
            continue
        since = state.nominated_at if state.nominated_at is not None else session.now
        if session.readiness.timed_out(gang) or session.now - since >= NOMINATION_SECONDS:
            message = (
                f"gang {key} did not bind within {NOMINATION_SECONDS:g}s of its "
                "preemption; the room held for it is released"
            )
            session.reporting.say(
                gang, reason="PreemptionExpired", message=message, pods=pending(gang)
            )
            session.add(session.nominations, *(Nomination(ref, "") for ref in state.nominated))
            outcome.state = _without_nomination(state)
            continue
        session.wake(since + NOMINATION_SECONDS)  # to let it go then, if nothing else wakes it
        waiting = {p.ref: p for p in pending(gang)}
        state = _drop_unfit(session, gang, state, waiting)
        held: dict[PodRef, str] = {}
        for ref, node in sorted(state.nominated.items()):
            pod = waiting.get(ref)
            if pod is None or node not in session.snapshot.nodes:
                continue
            if _volume_unknown(session, pod):
                continue  # its volume not seen yet: judged once it is
            if not session.ledger.admits(pod, node):
                continue
            # Held room is bound as it stands once the gang fits: the other pods' leave too
            # (anti-affinity, host ports), as ``keep_holds`` asks it.
            check = session.finder.check(pod, session.ledger)
            if check is not None and check.reason(node):
                continue
            session.ledger.place(pod, node)
            held[ref] = node
        session.nominated_holds[key] = held
        outcome.state = replace(state, reservations=held)


def _drop_unfit(
    session: Session, gang: Gang, state: GangState, waiting: Mapping[PodRef, Pod]
) -> GangState:
    """The nominations left once those on nodes their members may no longer go on at all
    (a claim since bound to a volume elsewhere, a taint, a label) are let go, and said so:
    such a member is placed as any pending member is. A topology-placed gang lets go of
    them all: it is arranged anew, whole."""
    nodes = session.snapshot.nodes
    unfit = sorted(
        ref
        for ref, node in state.nominated.items()
        if ref in waiting
        and node in nodes
        and not _volume_unknown(session, waiting[ref])
        and node not in session.finder.static_fit(waiting[ref])
    )
    if not unfit:
        return state
    going = sorted(state.nominated) if gang.topology_placed else unfit
    session.reporting.say(
        gang,
        reason="HoldReleased",
        message=(
            f"gang {gang.key} let go of the room its preemption freed for {len(going)} "
            f"member(s): the nodes no longer suit {len(unfit)} of them (a volume bound "
            "elsewhere, a taint or a label since); "
            + ("it is placed anew, whole" if gang.topology_placed else "they are placed anew")
        ),
        pods=[waiting[ref] for ref in going if ref in waiting],
        warning=False,
    )
    session.add(session.nominations, *(Nomination(ref, "") for ref in going))
    gone = set(going)
    return replace(state, nominated={r: n for r, n in state.nominated.items() if r not in gone})


def _volume_unknown(session: Session, pod: Pod) -> bool:
    """Whether a claim of ``pod`` names a volume the cache has not shown yet (its watch may
    lag the claims'): where the pod may go is not known until it has."""
    if not pod.claims:
        return False
    snapshot = session.snapshot
    return None in volume_terms(pod, claims=snapshot.claims, volumes=snapshot.volumes)
