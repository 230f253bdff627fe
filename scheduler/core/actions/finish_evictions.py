"""Finish evictions: what a pass chose to evict is evicted whole, even when the scheduler that
chose it stopped part-way through sending it.

Each victim is marked (its ``DisruptionTarget`` condition, whose message begins with the
scheduler's name) and then deleted. A leader that loses its Lease, or dies, between the
marks and deletes of one victim set leaves some victims marked and running, and perhaps some
members of a victim gang neither: the gang runs below its minimum, and nothing would choose
it again (its preemptor may fit by then). The marks say what was decided, so every pass,
whichever replica leads:

- once every mark on a gang of ours is ``RESEND_SECONDS`` old (not while the first send may
  still be under way: a leader sends a victim set's marks and deletes over several round
  trips), a gang whose marks say it was chosen whole has its marked members evicted again
  and the rest of it too;
- members above the minimum marked alone are evicted again while the minimum runs
  unmarked; a gang that has lost other members since keeps them.

Marks of other schedulers (kube-scheduler writes the same condition) are theirs to finish,
and victims this replica is still evicting (``snapshot.leaving``: their deletes may wait
behind a backlog of binds for longer than ``RESEND_SECONDS``) are its sender's.
"""

from __future__ import annotations

from scheduler.core.gangs import priority_of
from scheduler.core.session import Session
from scheduler.model.decisions import STALE_GANG, Eviction
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod, gang_key_of

# A mark this old whose pod still runs is sent again: the first send retries failures for
# a while itself, and a pass must not race it; a send's own rewrite of the mark restarts
# the count, so a pod whose deletion is refused for good is tried this often.
RESEND_SECONDS = 30.0


class FinishEvictions:
    """Victims marked and still running are evicted, and their gangs whole."""

    name = "finish-evictions"

    def run(self, session: Session) -> None:
        finish_evictions(session)


def finish_evictions(session: Session) -> None:
    names = session.config.scheduler_names
    leaving = session.snapshot.leaving
    # Marks are rare: one look at the pods, and most passes are done.
    keys = {
        gang_key_of(p)
        for p in session.snapshot.pods
        if p.disrupted is not None
        and p.disrupted.by in names
        and p.bound
        and p.alive
        and p.ref.uid not in leaving
    }
    for key in sorted(keys):
        gang = session.gangs.get(key)
        if gang is None:
            continue
        running = [p for p in gang.members if p.bound and p.alive and p.ref.uid not in leaving]
        marked = [p for p in running if p.disrupted is not None and p.disrupted.by in names]
        if not marked:
            continue
        newest = max(_since(p) for p in marked)
        if session.now - newest < RESEND_SECONDS:
            session.wake(newest + RESEND_SECONDS)  # a fresh mark: its sender may be sending
            continue
        unmarked = [p for p in running if p.disrupted is None]
        if any(p.disrupted is not None and p.disrupted.whole_gang for p in marked):
            going = [*marked, *unmarked]  # the gang was chosen whole
        elif len(unmarked) >= gang.min_member:
            going = marked  # members above the minimum: the rest runs on
        else:
            continue  # members above it were marked, and others went since: it keeps them
        with session.turn((key,), [gang]):
            for pod in going:
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
        whole_gang=marked.disrupted is not None and marked.disrupted.whole_gang,
    )
