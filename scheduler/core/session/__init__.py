"""The session of a pass (``passing.Session``) and its parts, each a job of its own."""

from scheduler.core.gangs import topology_of
from scheduler.core.session.outcomes import (
    NOMINATION_SECONDS,
    REASON_GATED,
    REASON_INVALID,
    REASON_SCHEDULED,
    REASON_SCHEDULER_ERROR,
    REASON_TIMEOUT,
    REASON_UNSCHEDULABLE,
    REASON_WAITING,
    Outcome,
    gated,
    of_timeout,
    pending,
    present,
)
from scheduler.core.session.passing import Session, Watcher

__all__ = [
    "NOMINATION_SECONDS",
    "REASON_GATED",
    "REASON_INVALID",
    "REASON_SCHEDULED",
    "REASON_SCHEDULER_ERROR",
    "REASON_TIMEOUT",
    "REASON_UNSCHEDULABLE",
    "REASON_WAITING",
    "Outcome",
    "Session",
    "Watcher",
    "gated",
    "of_timeout",
    "pending",
    "present",
    "topology_of",
]
