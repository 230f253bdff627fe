"""The PodGroup status a gang should show, computed from its members and what the pass did.

Written only when it differs from what the PodGroup already shows, so a quiet cluster makes
no status writes; a condition keeps its lastTransitionTime while its status and reason hold.
"""

from __future__ import annotations

from collections.abc import Collection

from scheduler.model.gangs import Condition, Gang, PodGroupStatus
from scheduler.model.pods import FAILED, RUNNING, SUCCEEDED, TERMINAL_PHASES, PodRef
from scheduler.model.times import format_time

SCHEDULED = "Scheduled"
# Present once a gang was satisfied: False while its running, succeeded and pending members
# together are fewer than minMember (seed 003), True again when they are not.
MIN_MEMBER_AVAILABLE = "MinMemberAvailable"

PENDING_PHASE = "Pending"
SCHEDULING_PHASE = "Scheduling"
SCHEDULED_PHASE = "Scheduled"
RUNNING_PHASE = "Running"
FINISHED_PHASE = "Finished"
FAILED_PHASE = "Failed"


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
) -> PodGroupStatus:
    """``condition`` is the Scheduled condition as (status, reason, message).

    The phase follows scheduler-plugins' and Koordinator's rules, read per incarnation: a
    live incarnation with minMember members running (or bound) is Running (Scheduled);
    otherwise any failed member with failed + running + succeeded at least minMember makes
    the gang Failed, as does a timeout.
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
    wanted = {SCHEDULED: condition}
    if satisfied:
        wanted[MIN_MEMBER_AVAILABLE] = (
            ("False", "BelowMinMember", below_min)
            if below_min
            else ("True", "MinMemberAvailable", f"at least {need} members running or pending")
        )
    others = tuple(c for c in current.conditions if c.type not in wanted)
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
