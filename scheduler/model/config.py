"""The settings a scheduling pass depends on (from flags; defaults suit most clusters)."""

from __future__ import annotations

from dataclasses import dataclass

# The actions of a pass, in order, by name (``scheduler.core.actions.REGISTRY``).
DEFAULT_ACTIONS = (
    "finish-evictions", "allocate", "hold-head", "evict-stale", "preempt", "reclaim"
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Config:
    # The scheduler's identity (its Lease, its metrics, its Events' component) and the first
    # spec.schedulerName it answers; ``aliases``: the other names it answers too, as operators
    # hard-code them (scheduler-plugins-scheduler, volcano), so that they work unchanged.
    scheduler_name: str = "gang-scheduler"
    aliases: tuple[str, ...] = ()
    # How long a gang may wait to be placed, counted from its first attempt, when neither
    # its PodGroup nor its annotations say.
    default_timeout_seconds: float = 600.0
    # Backoff between attempts of a gang that did not fit: doubles from initial up to max.
    initial_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 10.0
    # A gang that failed for want of room is tried again on a change that could help it, or
    # at the latest after this long (kube-scheduler's podMaxInUnschedulablePodsDuration).
    unschedulable_flush_seconds: float = 60.0
    # A gang waiting this long from its first attempt is the head gang: the room it needs is
    # held for it on chosen nodes as it frees, and other gangs backfill only the rest.
    starvation_seconds: float = 300.0
    # The reserve action: how many gangs left unplaced, first in queue order, have the room
    # the forward play started them on held for them in a pass.
    reservations: int = 1
    # A running gang with fewer running (and succeeded) members than its minimum for this
    # long has the rest evicted, so its room goes to gangs that can run (KAI's stale-gang
    # eviction); None: never, unless a gang asks (gang-scheduler.io/stale-after).
    stale_gang_seconds: float | None = None
    # Time-based fair share (as KAI's): with a half-life, a queue's recent usage (an
    # average decaying by half every so many seconds) counts beside what it holds now when
    # the next gang is chosen; None: what it holds now alone.
    fair_share_half_life_seconds: float | None = None
    # --topology-from-labels: ((level, node label key), ...) top level first; used when no
    # topology ConfigMap exists.
    topology_labels: tuple[tuple[str, str], ...] = ()
    # Among the nodes that fit: "pack" (most allocated first) or "spread" (least allocated).
    scoring: str = "pack"
    # The actions each pass runs, in this order (--actions).
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    # Consolidation (the consolidate action, run only if --actions names it): the pods it
    # may move in one pass, and the priority a movable pod must be below to be moved.
    max_moves_per_pass: int = 4
    movable_below_priority: int = 1_000_000_000
    # Claims that wait for their first consumer get their volumes chosen or provisioned on
    # the node each pod is placed on (kube-scheduler's VolumeBinding); off, such pods wait
    # and say why (a cluster whose volumes some other component binds).
    bind_volumes: bool = True
    # How long a group's claims may take to be bound (their volumes made) before its pods
    # are, after which it is tried again (kube-scheduler's bindTimeoutSeconds).
    volume_bind_timeout_seconds: float = 600.0

    @property
    def scheduler_names(self) -> frozenset[str]:
        """Every spec.schedulerName whose pods are ours."""
        return frozenset((self.scheduler_name, *self.aliases))

    def backoff(self, attempts: int) -> float:
        """The wait after the ``attempts``-th failed attempt (1-based). The doubling stops at
        2**63: a gang that failed a thousand times (hours of waiting) would make the float
        overflow and the pass raise."""
        doublings = min(max(attempts - 1, 0), 63)
        return min(self.initial_backoff_seconds * 2**doublings, self.max_backoff_seconds)
