"""Finish evictions: what a pass chose to evict is evicted whole, even when the scheduler that
chose it stopped part-way through sending it.

Each victim is marked (its ``DisruptionTarget`` condition, whose message begins with the
scheduler's name) and then deleted. A leader that loses its Lease, or dies, between the
marks and deletes of one victim set leaves some victims marked and running, and perhaps some
members of a victim gang neither: the gang runs below its minimum, and nothing would choose
it again (its preemptor may fit by then). The marks say what was decided, so every pass,
whichever replica leads:

- a pod of ours still running with its mark on it is evicted again, once every mark on its
  gang is ``RESEND_SECONDS`` old (not while the first send may still be under way: a
  leader sends a victim set's marks and deletes over several round trips);
- and then a gang of ours with fewer than its minimum members running unmarked has them
  evicted too: a victim gang goes whole, and only a whole gang was ever chosen to leave
  fewer than its minimum (members above it are the only ones taken alone).

Marks of other schedulers (kube-scheduler writes the same condition) are theirs to finish.
"""

from __future__ import annotations

from scheduler.core.gangs import priority_of
from scheduler.core.session import Session
from scheduler.model.decisions import Eviction
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod, gang_key_of

# A mark this old whose pod still runs is sent again: the first send retries failures for
# a while itself, and a pass must not race it; a send's own rewrite of the mark restarts
# the count, so a pod whose deletion is refused for good is tried this often.
RESEND_SECONDS = 30.0
STALE_GANG = "StaleGang"


class FinishEvictions:
    """Victims marked and still running are evicted, and their gangs whole."""

    name = "finish-evictions"

    def run(self, session: Session) -> None:
        finish_evictions(session)


def finish_evictions(session: Session) -> None:
    names = session.config.scheduler_names
    # Marks are rare: one look at the pods, and most passes are done.
    keys = {
        gang_key_of(p)
        for p in session.snapshot.pods
        if p.disrupted is not None and p.disrupted.by in names and p.bound and p.alive
    }
    for key in sorted(keys):
        gang = session.gangs.get(key)
        if gang is None:
            continue
        running = [p for p in gang.members if p.bound and p.alive]
        marked = [p for p in running if p.disrupted is not None and p.disrupted.by in names]
        if not marked or any(session.now - _since(p) < RESEND_SECONDS for p in marked):
            continue  # a fresh mark: its sender may still be sending the rest
        unmarked = [p for p in running if p.disrupted is None]
        rest = unmarked if len(unmarked) < gang.min_member else []
        with session.turn((key,), [gang]):
            for pod in [*marked, *rest]:
                session.add(session.evictions, _eviction(session, gang, pod, marked[0]))


def _since(pod: Pod) -> float:
    return pod.disrupted.since if pod.disrupted is not None else 0.0


def _eviction(session: Session, gang: Gang, pod: Pod, marked: Pod) -> Eviction:
    reason = marked.disrupted.reason if marked.disrupted is not None else ""
    return Eviction(
        pod.ref,
        pod.node_name,
        f"Evicted to finish the eviction of gang {gang.key}, whose members were marked "
        f"({reason}) by an earlier pass: it would otherwise run below its minimum "
        f"{gang.min_member}",
        priority=priority_of(pod, session.snapshot.priority_classes),
        stale=reason == STALE_GANG,
    )
