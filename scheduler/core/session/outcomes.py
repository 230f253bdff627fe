"""What a pass decides about each gang (``Outcome``), the members it works on, and the
words its conditions use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.core.statuses import NOT_TRIED
from scheduler.model.decisions import Binding
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod
from scheduler.model.snapshot import GangState

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session

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


class Outcome:
    """What the session decided about one gang, before it becomes events and status. Each
    change made while a turn is open goes on that turn's Statement, so undoing the turn puts
    the old value back."""

    __slots__ = ("below_min", "bindings", "condition", "relaxed", "session", "state")

    state: GangState
    condition: tuple[str, str, str]
    bindings: list[Binding]
    relaxed: tuple[str, ...]  # soft topology constraints the placement could not meet
    below_min: str | None  # set while a satisfied gang has fewer than minMember members left
    session: Session | None

    def __init__(
        self,
        state: GangState,
        condition: tuple[str, str, str] = NOT_TRIED,
        *,
        session: Session | None = None,
    ) -> None:
        init = object.__setattr__  # not a change of a turn
        init(self, "session", session)
        init(self, "state", state)
        init(self, "condition", condition)
        init(self, "bindings", [])
        init(self, "relaxed", ())
        init(self, "below_min", None)

    def __setattr__(self, name: str, value: object) -> None:
        session = self.session
        turn = session.open if session is not None else None
        if turn is not None:
            turn.field(self, name, getattr(self, name))
        object.__setattr__(self, name, value)

    def bind(self, *bindings: Binding) -> None:
        """Add members placed for the gang in this turn."""
        self.bindings = [*self.bindings, *bindings]


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


def present(gang: Gang) -> int:
    """The members that count toward the gang's declared total: those to be placed, those
    bound and alive, and those that completed (a Job does not make them again). Room held
    for a gang with fewer than its total stands idle: it is not tried until the rest exist."""
    live = sum(1 for p in gang.members if p.alive and (p.bound or not p.gates))
    return live + gang.completed


def gated(gang: Gang) -> list[Pod]:
    """The members that would be pending but for their spec.schedulingGates."""
    return [p for p in gang.members if not p.bound and p.alive and p.gates]
