"""Queues shared by teams, as Volcano's Queue (``scheduling.volcano.sh/v1beta1``, the
API users already have): a tree of queues, each with a hard ceiling (``capability``), room
kept for it (``guarantee``), the share reclaim restores (``deserved``) and a weight for what
is beyond the deserved shares.

This is the first step: queues as data and their tree checked. Gangs joining queues, the
fair order and reclaim come next; until then a queue changes no decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.model.pods import LabelSelector
from scheduler.model.resources import Resources

QUEUE_API = "scheduling.volcano.sh/v1beta1"
DEFAULT_QUEUE = "default"  # where a gang that names none goes, as in Volcano
OPEN = "Open"
CLOSED = "Closed"


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """Time-based fair share: what each queue's own pods held on average lately, per
    resource, as of ``at``: an exponentially decaying average with the half-life of
    --fair-share-half-life, kept by the scheduler between passes (not across restarts)."""

    at: float
    average: Mapping[str, Mapping[str, float]]
    # What each queue held at ``at``: held, as far as the core knows, until the next update
    # (the gap counts at what was held in it, not at what is held after it).
    held: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    """One Queue object, fields as Volcano names them. ``None``: not stated (no ceiling, no
    deserved share). ``state``: its status.state; a Closed (or Closing) queue takes no new
    gangs. ``errors`` name the field and what is allowed; a queue with errors takes none."""

    name: str
    uid: str = ""
    parent: str = ""  # "" for a child of the root
    weight: int = 1
    capability: Resources | None = None
    deserved: Resources | None = None
    guarantee: Resources | None = None
    reclaimable: bool = True
    priority: int = 0
    state: str = OPEN
    errors: tuple[str, ...] = ()
    # The namespaces whose gangs may use it (and its subtree), and the selector as written,
    # for messages. None: open to every namespace, as a Volcano queue is.
    namespace_selector: LabelSelector | None = None
    namespace_selector_text: str = ""

    @property
    def open(self) -> bool:
        return self.state == OPEN


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatus:
    """What ``kubectl get queues`` shows of a queue, as Volcano's QueueStatus names it:
    ``allocated`` is what its subtree holds (what counts against its capability);
    ``pending`` and ``running`` count gangs (waiting; with a member bound)."""

    state: str = ""
    allocated: Resources = field(default_factory=Resources)
    pending: int = 0
    running: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueCensus:
    """What the gangs of each queue hold and how many wait or run, by queue name (""
    for the default), counted over every pod of ours."""

    held: Mapping[str, Resources]
    running: Mapping[str, int]
    pending: Mapping[str, int]


def beyond_default(queues: Mapping[str, Queue]) -> bool:
    """Whether any queue but a default without limits exists: only then can queues change
    a decision for gangs that name none."""
    default = queues.get(DEFAULT_QUEUE)
    return any(name != DEFAULT_QUEUE for name in queues) or (
        default is not None and default != Queue(name=DEFAULT_QUEUE, uid=default.uid)
    )
