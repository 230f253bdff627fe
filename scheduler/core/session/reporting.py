"""What a pass says: Events on gangs, their pods and queues, pods' PodScheduled conditions,
first attempts kept on pods, and the placement written back once a gang binds."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from scheduler.core.arranging import placement_tree, ranks
from scheduler.core.session.outcomes import REASON_UNSCHEDULABLE, pending
from scheduler.model import names
from scheduler.model.decisions import (
    NORMAL,
    WARNING,
    Binding,
    Event,
    ObjectRef,
    Placement,
    PodCondition,
    PodPatch,
)
from scheduler.model.gangs import Gang
from scheduler.model.pods import SUCCEEDED, Pod, PodGroupApi
from scheduler.model.queues import QUEUE_API
from scheduler.model.times import format_time

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session


class Reporting:
    """What the pass says about gangs."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def say(
        self, gang: Gang, *, reason: str, message: str, pods: Iterable[Pod], warning: bool = True
    ) -> None:
        """Event on the gang's pods and PodGroup, once per distinct message."""
        outcome = self.session.outcomes[gang.key]
        if outcome.state.last_message == message:
            return
        outcome.state = replace(outcome.state, last_message=message)
        kind = WARNING if warning else NORMAL
        said: list[Event] = []
        if gang.podgroup is not None:
            pg = gang.podgroup
            said.append(
                Event(
                    ObjectRef("PodGroup", pg.key.namespace, pg.key.name, pg.uid, pg.served_as),
                    kind,
                    reason,
                    message,
                )
            )
        for pod in pods:
            ref = ObjectRef("Pod", pod.ref.namespace, pod.ref.name, pod.ref.uid)
            said.append(Event(ref, kind, reason, message))
        self.session.add(self.session.events, *said)

    def say_on_queue(self, gang: Gang, reason: str) -> None:
        """A queue that cannot be used is told so on the Queue itself too (once per gang it
        holds back, with the gang's own Event): whoever owns the queue sees what to fix."""
        book = self.session.queues.book
        problem = (
            book.problem(gang.queue, namespace=gang.key.namespace) if book is not None else None
        )
        if book is None or problem is None or reason != "InvalidQueue":
            return
        _, message, at = problem
        queue = book.queues[at]
        ref = ObjectRef("Queue", "", at, queue.uid, QUEUE_API)
        self.session.add(
            self.session.events,
            Event(ref, WARNING, reason, f"{message} (holds back gang {gang.key})"),
        )

    def failed_attempt(
        self, gang: Gang, message: str, *, pods: Iterable[Pod], reason: str = REASON_UNSCHEDULABLE
    ) -> None:
        outcome = self.session.outcomes[gang.key]
        attempts = outcome.state.attempts + 1
        retry_at = self.session.now + self.session.config.backoff(attempts)
        outcome.state = replace(outcome.state, attempts=attempts, retry_at=retry_at)
        self.session.wake(retry_at)
        pods = list(pods)
        self.say(gang, reason="FailedScheduling", message=message, pods=pods)
        self.mark_unscheduled(pods, reason=reason, message=message)
        self.persist_first_attempt(gang)

    def mark_unscheduled(self, pods: Iterable[Pod], *, reason: str, message: str) -> None:
        """``PodScheduled=False`` on each pod, as kube-scheduler writes it after a failed
        attempt, unless the pod says so already. The time of the transition is kept while
        the status stays False (a gated pod's SchedulingGated becoming Unschedulable)."""
        now = format_time(self.session.now)
        written = []
        for pod in pods:
            had = pod.scheduled_condition
            if had is not None and had[:3] == ("False", reason, message):
                continue
            since = had[3] if had is not None and had[0] == "False" and had[3] else now
            written.append(PodCondition(pod.ref, "False", reason, message, since))
        self.session.add(self.session.conditions, *written)

    def persist_first_attempt(self, gang: Gang) -> None:
        """A gang that waits keeps its clock across restarts: our PodGroups in their status,
        other gangs on their pods (only pods that do not carry it yet, so once per member;
        the upstream and Volcano PodGroups have no field for it)."""
        state = self.session.outcomes[gang.key].state
        first = state.first_attempt
        ours = gang.podgroup is not None and gang.podgroup.api is PodGroupApi.OURS
        if ours or first is None or state.satisfied:
            return  # a satisfied gang's members are placed one by one: no clock of theirs
        mark = {names.FIRST_ATTEMPT: format_time(first)}
        self.session.add(
            self.session.patches,
            *(PodPatch(p.ref, mark) for p in pending(gang) if p.first_attempt is None),
        )

    def check_min_member(self, gang: Gang, *, members: int, waiting: int) -> None:
        """As the Coscheduling KEP has it: a running gang whose running, succeeded and
        pending members together are fewer than minMember cannot work as a gang any more;
        say so once, so its controller (or a person) can restart it whole."""
        succeeded = sum(1 for p in gang.members if p.phase == SUCCEEDED)
        if members + succeeded + waiting >= gang.min_member:
            return
        outcome = self.session.outcomes[gang.key]
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
            ref = ObjectRef("PodGroup", pg.key.namespace, pg.key.name, pg.uid, pg.served_as)
        else:
            alive = next(p for p in gang.members if p.bound and p.alive)
            ref = ObjectRef("Pod", alive.ref.namespace, alive.ref.name, alive.ref.uid)
        self.session.add(
            self.session.events, Event(ref, WARNING, "Unschedulable", outcome.below_min)
        )

    def placement(self, gang: Gang, bindings: list[Binding], retries: int) -> Placement:
        pairs = [(b.pod, b.node) for b in bindings]
        group = gang.sakkara
        return Placement(
            ranks=tuple(ranks(pairs, self.session.topology)),
            tree=json.dumps(placement_tree(pairs, self.session.topology)),
            retries=retries,
            begin=min(p.created for p in gang.members),
            group=(group.namespace, group.configmap) if group else None,
            podgroup=gang.key if gang.podgroup is not None else None,
            podgroup_api=gang.podgroup.api if gang.podgroup is not None else PodGroupApi.OURS,
            podgroup_version=gang.podgroup.served_as if gang.podgroup is not None else "",
        )

    def refill_ranks(self, gang: Gang, bindings: list[Binding]) -> Placement | None:
        """Healing: members of a running topology-placed gang placed now (a lost one
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
                taken.add(int(rank))  # a finished member keeps its rank
            elif pod.alive:
                unlabelled += 1
        if not taken:
            return None
        # A member healed in an earlier pass whose label is not seen yet holds the rank it
        # was given, the lowest vacant in rank order then and now (else the next
        # replacement would get it again).
        vacant = (r for r in range(len(taken) + unlabelled + len(bindings)) if r not in taken)
        for _ in range(unlabelled):
            next(vacant)
        order = ranks([(b.pod, b.node) for b in bindings], self.session.topology)
        return Placement(
            ranks=tuple((ref, next(vacant)) for ref, _ in order),
            tree="",
            retries=1,
            begin=min(p.created for p in gang.members),
        )
