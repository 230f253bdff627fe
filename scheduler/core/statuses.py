"""The PodGroup status a gang should show, computed from its members and what the pass did.

Written only when it differs from what the PodGroup already shows, so a quiet cluster makes
no status writes; a condition keeps its lastTransitionTime while its status and reason hold.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from scheduler.model import names
from scheduler.model.forecasts import Eta, EtaState, shown_minute
from scheduler.model.gangs import Condition, Gang, PodGroupStatus, clip_message
from scheduler.model.pods import FAILED, RUNNING, SUCCEEDED, TERMINAL_PHASES, PodGroupApi, PodRef
from scheduler.model.times import format_time

SCHEDULED = "Scheduled"
# While a gang waits and a forward play has run (``--forecast-interval``): when it is
# expected to start, or why that is not known.
ESTIMATED_START = "EstimatedStart"
# Present once a gang was satisfied: False while its running, succeeded and pending members
# together are fewer than minMember (the Coscheduling KEP), True again when they are not.
MIN_MEMBER_AVAILABLE = "MinMemberAvailable"

PENDING_PHASE = "Pending"
SCHEDULING_PHASE = "Scheduling"
SCHEDULED_PHASE = "Scheduled"
RUNNING_PHASE = "Running"
FINISHED_PHASE = "Finished"
FAILED_PHASE = "Failed"
# The Scheduled condition of a gang no pass has tried yet.
NOT_TRIED = ("False", "Waiting", "not tried yet")

# The upstream PodGroup (scheduling.k8s.io): one condition, the type and reasons
# kube-scheduler writes (schedule_one_podgroup.go).
UPSTREAM_REASONS = ("Scheduled", "Unschedulable", "SchedulerError")
# Volcano's PodGroup: its conditions and reasons as its gang plugin writes them, and its
# phases (it has no Failed: a gang that failed or timed out is Unknown).
VOLCANO_SCHEDULED = "Scheduled"
VOLCANO_UNSCHEDULABLE = "Unschedulable"
VOLCANO_READY = "tasks in gang are ready to be scheduled"
VOLCANO_NOT_ENOUGH_RESOURCES = "NotEnoughResources"
VOLCANO_NOT_ENOUGH_TASKS = "NotEnoughTasks"
VOLCANO_PHASES = {
    PENDING_PHASE: "Pending",
    SCHEDULING_PHASE: "Inqueue",
    SCHEDULED_PHASE: "Running",
    RUNNING_PHASE: "Running",
    FINISHED_PHASE: "Completed",
    FAILED_PHASE: "Unknown",
}


def desired_status(
    gang: Gang,
    *,
    binding_now: Collection[PodRef],
    first_attempt: float | None,
    timed_out: bool,
    condition: tuple[str, str, str],
    now: float,
    below_min: str | None = None,
    satisfied: bool = False,
    queue_held: bool = False,
    eta: Eta | None = None,
) -> PodGroupStatus:
    """``condition`` is the Scheduled condition as (status, reason, message).

    Each kind of PodGroup gets the status its own API defines (``_upstream``, ``_volcano``);
    ours is computed here. The phase follows scheduler-plugins' and Koordinator's rules,
    read per incarnation: a live incarnation with minMember members running (or bound) is
    Running (Scheduled); otherwise any failed member with failed + running + succeeded at
    least minMember makes the gang Failed, as does a timeout.
    """
    members = gang.members
    scheduled = sum(1 for p in members if p.bound or p.ref in binding_now)
    live_scheduled = sum(1 for p in members if (p.bound and p.alive) or p.ref in binding_now)
    running = sum(1 for p in members if p.phase == RUNNING and not p.deleting)
    succeeded = sum(1 for p in members if p.phase == SUCCEEDED)
    failed = sum(1 for p in members if p.phase == FAILED)
    active = sum(1 for p in members if p.phase not in TERMINAL_PHASES)
    waiting = any(not p.bound and p.alive and p.ref not in binding_now for p in members)
    need = gang.min_member
    if timed_out:
        phase = FAILED_PHASE
    elif succeeded >= need and active == 0:
        phase = FINISHED_PHASE
    elif running + succeeded >= need:
        phase = RUNNING_PHASE
    elif live_scheduled >= need:
        phase = SCHEDULED_PHASE
    elif waiting and not live_scheduled:
        # A new incarnation waits (a Job recreated its pods): the old one's failures are
        # history, not this gang's phase.
        phase = SCHEDULING_PHASE if first_attempt is not None else PENDING_PHASE
    elif failed and (failed + running + succeeded >= need or active == 0):
        phase = FAILED_PHASE
    elif first_attempt is not None:
        phase = SCHEDULING_PHASE
    else:
        phase = PENDING_PHASE

    current = gang.podgroup.status if gang.podgroup else PodGroupStatus()
    api = gang.podgroup.api if gang.podgroup else PodGroupApi.OURS
    # An estimate is said only while the gang waits: gone once it is placed.
    estimate = _estimated_start(eta) if waiting and not (satisfied or timed_out) else None
    if api is PodGroupApi.WORKLOAD:
        return _estimated(
            _upstream(gang, current, condition=condition, now=now),
            names.FOREIGN_ESTIMATED_START, estimate, now=now,
        )  # fmt: skip
    if api is PodGroupApi.VOLCANO:
        # Volcano's Inqueue means its queue let it in (the enqueue action): a gang its
        # queue holds back (Closed, unknown, its minimum over a capability) stays Pending.
        held = queue_held and phase == SCHEDULING_PHASE
        phase = "Pending" if held else VOLCANO_PHASES.get(phase, phase)
        counts = {"running": running, "succeeded": succeeded, "failed": failed}
        # Volcano's NotEnoughTasks: fewer tasks than the gang waits for (its ValidTaskNum
        # below minMember), not any wait before an attempt (a Closed queue, say).
        short = sum(1 for p in members if p.alive) < gang.total
        return _estimated(
            _volcano(
                current, phase=phase, counts=counts, condition=condition, now=now, short=short
            ),
            names.FOREIGN_ESTIMATED_START, estimate, now=now,
        )  # fmt: skip
    wanted = {SCHEDULED: condition}
    if estimate is not None:
        wanted[ESTIMATED_START] = estimate
    if satisfied:
        wanted[MIN_MEMBER_AVAILABLE] = (
            ("False", "BelowMinMember", below_min)
            if below_min
            else ("True", "MinMemberAvailable", f"at least {need} members running or pending")
        )
    others = tuple(
        c for c in current.conditions if c.type not in wanted and c.type != ESTIMATED_START
    )
    written = tuple(
        _condition(kind, value, current=current, now=now) for kind, value in wanted.items()
    )
    return PodGroupStatus(
        phase=phase,
        scheduled=scheduled,
        running=running,
        succeeded=succeeded,
        failed=failed,
        schedule_start_time=(
            format_time(first_attempt) if first_attempt is not None else current.schedule_start_time
        ),
        occupied_by=current.occupied_by,
        conditions=(*others, *written),
    )


def _estimated_start(eta: Eta | None) -> tuple[str, str, str] | None:
    """The EstimatedStart condition of a waiting gang, from the latest forward play: True
    with the time (to the minute, so that a play that moves it by seconds writes nothing)
    and whom it waits behind, or False with why there is no estimate. None: no play has
    looked at it, or it fits now (it is being placed)."""
    if eta is None or eta.state is EtaState.FITS_NOW:
        return None
    if eta.state is EtaState.ESTIMATED and eta.p50 is not None:
        at = format_time(shown_minute(eta.p50))
        bad = f" (p90 {format_time(shown_minute(eta.p90))})" if eta.p90 is not None else ""
        behind = f", once {', '.join(map(str, eta.behind))} ended" if eta.behind else ""
        return (
            "True",
            "Estimated",
            clip_message(
                f"expected to start at {at}{bad}{behind}, if the runs ahead of it end when "
                "expected and no gang that sorts ahead of it arrives"
            ),
        )
    reason = "".join(word.capitalize() for word in eta.state.value.split("-"))
    return ("False", reason, clip_message(eta.reason or eta.state.value))


def _estimated(
    status: PodGroupStatus, kind: str, estimate: tuple[str, str, str] | None, *, now: float
) -> PodGroupStatus:
    """``status`` with the estimate as condition ``kind`` in place of the one it had, or
    without one when there is no estimate (the gang is placed, or no play has run)."""
    if estimate is None:
        kept = tuple(c for c in status.conditions if c.type != kind)
        return status if len(kept) == len(status.conditions) else replace(status, conditions=kept)
    written = _condition(kind, estimate, current=status, now=now)
    return replace(status, conditions=_put(status.conditions, (written,)))


def expected_start_mark(eta: Eta | None) -> str:
    """What ``gang-scheduler.io/expected-start`` says of an estimate: the minute, or
    "unknown: <state>"; "" when nothing is to be said (no play, or it fits now)."""
    if eta is None or eta.state is EtaState.FITS_NOW:
        return ""
    if eta.state is EtaState.ESTIMATED and eta.p50 is not None:
        return format_time(shown_minute(eta.p50))
    return f"unknown: {eta.state.value}"


def _condition(
    kind: str, value: tuple[str, str, str], *, current: PodGroupStatus, now: float
) -> Condition:
    """A condition keeps its lastTransitionTime while its status and reason hold."""
    status, reason, message = value
    previous = next((c for c in current.conditions if c.type == kind), None)
    if previous is not None and (previous.status, previous.reason) == (status, reason):
        since = previous.last_transition
    else:
        since = format_time(now)
    return Condition(
        type=kind, status=status, reason=reason, message=message, last_transition=since
    )


def _upstream(
    gang: Gang, current: PodGroupStatus, *, condition: tuple[str, str, str], now: float
) -> PodGroupStatus:
    """kube-scheduler's ``PodGroupScheduled`` (``PodGroupInitiallyScheduled`` from v1beta1
    on: the PodGroup's ``scheduled_condition``): True/Scheduled once placed, else
    False/Unschedulable (or SchedulerError for an internal error), never back from True to
    False (kube-scheduler's rule: later members of a scheduled group do not regress it),
    nothing before a first attempt. The transition time moves only when the status does
    (``meta.SetStatusCondition``); ``observedGeneration`` is the PodGroup's generation."""
    status, reason, message = condition
    if condition == NOT_TRIED:
        return current
    kind = gang.podgroup.scheduled_condition if gang.podgroup else names.UPSTREAM_SCHEDULED
    previous = next((c for c in current.conditions if c.type == kind), None)
    if previous is not None and previous.status == "True" and status != "True":
        return current
    if status == "True":
        reason = "Scheduled"
    elif reason not in UPSTREAM_REASONS:
        reason = "Unschedulable"
    since = (
        previous.last_transition
        if previous is not None and previous.status == status and previous.last_transition
        else format_time(now)
    )
    written = Condition(
        type=kind,
        status=status,
        reason=reason,
        message=clip_message(message),
        last_transition=since,
        observed_generation=gang.podgroup.generation if gang.podgroup else 0,
    )
    return replace(current, conditions=_put(current.conditions, (written,)))


def _volcano(
    current: PodGroupStatus,
    *,
    phase: str,
    counts: dict[str, int],
    condition: tuple[str, str, str],
    now: float,
    short: bool,
) -> PodGroupStatus:
    """Volcano's status: its phase, the counts, and the conditions its gang plugin writes:
    ``Scheduled`` (True, "tasks in gang are ready to be scheduled") once placed, else
    ``Unschedulable`` (True, NotEnoughResources, or NotEnoughTasks while members are
    missing: gated, or fewer alive than the gang waits for, ``short``; a gang that waits with
    all its members, for its queue say, wants room). The other of the two is set False
    rather than left saying the opposite."""
    status, reason, message = condition
    wanted: dict[str, tuple[str, str, str]] = {}
    if status == "True":
        wanted[VOLCANO_SCHEDULED] = ("True", VOLCANO_READY, message)
        if any(c.type == VOLCANO_UNSCHEDULABLE for c in current.conditions):
            wanted[VOLCANO_UNSCHEDULABLE] = ("False", VOLCANO_READY, message)
    elif condition != NOT_TRIED:
        # For members, not for room.
        waiting = reason == "SchedulingGated" or (reason == "Waiting" and short)
        why = VOLCANO_NOT_ENOUGH_TASKS if waiting else VOLCANO_NOT_ENOUGH_RESOURCES
        wanted[VOLCANO_UNSCHEDULABLE] = ("True", why, message)
    written = tuple(
        _condition(kind, value, current=current, now=now) for kind, value in wanted.items()
    )
    return replace(current, phase=phase, conditions=_put(current.conditions, written), **counts)


def _put(
    conditions: tuple[Condition, ...], written: tuple[Condition, ...]
) -> tuple[Condition, ...]:
    """``conditions`` with each of ``written`` in the place of the one of its type, or added
    at the end: the order the API server keeps, so an unchanged status compares equal and is
    not written again."""
    by_type = {c.type: c for c in written}
    kept = tuple(by_type.pop(c.type, c) for c in conditions)
    return (*kept, *(c for c in written if c.type in by_type))
