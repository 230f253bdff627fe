"""Queues in a pass: the tree checked (what is wrong with each queue, in words that say
what to do; a queue with a problem takes no new gangs and its gangs say why, the rest of the
tree goes on), each queue's fair share and dominant share (the fair order), and the room its
capability, and other queues' guarantees, leave a gang. Pure: from queues and what they hold
to shares, orders and refusals."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from scheduler.core.filtering import selector_matches
from scheduler.core.statement import Kind, Operation
from scheduler.model import names
from scheduler.model.pods import Pod
from scheduler.model.queues import (
    CLOSED,
    DEFAULT_QUEUE,
    OPEN,
    Queue,
    QueueCensus,
    QueueStatus,
    QueueUsage,
)
from scheduler.model.resources import Resources, format_amount

ROOT = "root"  # Volcano's root queue: a queue without a parent is its child


def _over(child: Resources | None, parent: Resources | None) -> list[str]:
    """The resources ``child`` states beyond what ``parent`` states (an unstated limit is
    none)."""
    if child is None or parent is None:
        return []
    return sorted(r for r, amount in child.items() if r in parent and amount > parent[r])


def tree_errors(queues: Mapping[str, Queue]) -> dict[str, tuple[str, ...]]:
    """Per queue name, what is wrong with it or with where it sits in the tree: an unknown
    parent, a cycle of parents, a child asking more than its parent (capability, deserved,
    guarantee), a guarantee or deserved share above its own capability."""
    found: dict[str, list[str]] = {name: list(q.errors) for name, q in queues.items()}
    for name, queue in queues.items():
        errors = found[name]
        parent_name = queue.parent
        if parent_name and parent_name != ROOT and parent_name not in queues:
            errors.append(
                f"spec.parent names queue {parent_name!r}, which does not exist: create it, "
                "or leave parent out (a child of the root)"
            )
        seen = [name]
        at = parent_name
        while at and at != ROOT and at in queues:
            if at in seen:
                chain = " -> ".join([*seen[seen.index(at) :], at])
                errors.append(f"spec.parent makes a cycle ({chain}): a queue tree has no cycles")
                break
            seen.append(at)
            at = queues[at].parent
        for field, mine in (("deserved", queue.deserved), ("guarantee", queue.guarantee)):
            beyond = _over(mine, queue.capability)
            if beyond:
                errors.append(
                    f"spec.{field} asks more {', '.join(beyond)} than its own spec.capability"
                )
        parent = queues.get(parent_name)
        if parent is None:
            continue
        for field in ("capability", "deserved", "guarantee"):
            beyond = _over(getattr(queue, field), getattr(parent, field))
            if beyond:
                errors.append(
                    f"spec.{field} asks more {', '.join(beyond)} than its parent "
                    f"{parent_name!r} has in its spec.{field}: a child's limits live inside "
                    "its parent's"
                )
    return {name: tuple(dict.fromkeys(errors)) for name, errors in found.items() if errors}


def _amount(name: str, value: float) -> str:
    return format_amount(name, int(value))


class QueueBook:
    """The queues of one pass: what each holds, its fair share, and the room its
    limits leave a gang. Built from the snapshot at the start of a pass; ``take`` counts what
    the pass commits, so the next gang's turn sees it.

    Fair shares are worked out per resource by water filling down the tree: a queue that
    states ``deserved`` for a resource gets it (``guarantee`` at least), the rest of its
    parent's share is split among its siblings by ``weight``, none beyond its capability. A
    queue's dominant share is the largest, over the resources, of what its subtree holds
    against its fair share (DRF): the queue furthest below its fair share goes first.
    """

    def __init__(
        self,
        queues: Mapping[str, Queue],
        *,
        usage: Mapping[str, Mapping[str, int]],
        total: Mapping[str, int],
        waiting: Mapping[str, Mapping[str, int]] | None = None,
        leaving: Mapping[str, Mapping[str, int]] | None = None,
        past: Mapping[str, Mapping[str, float]] | None = None,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        known = dict(queues)
        # Namespaces' labels, for the queues that admit only some namespaces.
        self.namespaces = namespaces or {}
        if DEFAULT_QUEUE not in known:
            known[DEFAULT_QUEUE] = Queue(name=DEFAULT_QUEUE)  # as if it had no spec
        self.queues = known
        self.errors = tree_errors(known)
        self.total = {r: a for r, a in total.items() if a > 0}
        self._parent: dict[str, str | None] = {}
        for name, queue in known.items():
            parent = queue.parent
            ok = parent and parent != ROOT and parent in known and name not in self.errors
            self._parent[name] = parent if ok else None
        self._children: dict[str | None, list[str]] = {}
        for name in sorted(known):
            self._children.setdefault(self._parent[name], []).append(name)
        # What each queue's subtree holds (its own gangs and its descendants').
        self.held: dict[str, dict[str, int]] = {name: {} for name in known}
        for name, amounts in usage.items():
            if name in known:
                self._add(name, amounts)
        # Time-based fair share: what each subtree held on average lately (None: off).
        self.past: dict[str, dict[str, float]] | None = None
        if past is not None:
            self.past = {name: {} for name in known}
            for name, amounts in past.items():
                for at in self.ancestors(name) if name in known else ():
                    for resource, amount in amounts.items():
                        self.past[at][resource] = self.past[at].get(resource, 0.0) + amount
        # Of what they hold, what is leaving (pods being deleted: a preemption's or a
        # reclaim's victims). It still counts against a capability (the room is not free
        # yet), not for reclaim, which must not take a queue's share twice.
        self.leaving: dict[str, dict[str, int]] = {name: {} for name in known}
        for name, amounts in (leaving or {}).items():
            if name in known:
                for at in self.ancestors(name):
                    for resource, amount in amounts.items():
                        self.leaving[at][resource] = self.leaving[at].get(resource, 0) + amount
        # What each queue's subtree could use: what it holds and what its gangs wait for.
        # A queue wants no more than that: the rest of its share goes to its siblings
        # (Volcano's proportion caps a deserved share by the queue's request). Unknown
        # (None): shares by weight and capability alone.
        self.demand: dict[str, dict[str, int]] | None = None
        if waiting is not None:
            self.demand = {name: dict(held) for name, held in self.held.items()}
            for name, amounts in waiting.items():
                if name in known:
                    for at in self.ancestors(name):
                        wants = self.demand[at]
                        for resource, amount in amounts.items():
                            wants[resource] = wants.get(resource, 0) + amount
        self.fair: dict[str, dict[str, float]] = {}
        self._fill(None, self.total)
        # The resources the queues want more of than the cluster has: only they are
        # contended, and only they count when reclaim weighs shares (a queue under its share
        # of GPUs is not refused for holding more CPU than it "deserves" of an idle CPU pool).
        self.contended: frozenset[str] | None = None
        if self.demand is not None:
            wanted: dict[str, int] = {}
            for name in self._children.get(None, []):
                for resource, amount in self.demand[name].items():
                    wanted[resource] = wanted.get(resource, 0) + amount
            self.contended = frozenset(
                r for r, amount in wanted.items() if amount > self.total.get(r, 0)
            )

    def name_of(self, queue: str) -> str:
        """The queue a gang naming ``queue`` is in ("" names the default)."""
        return queue or DEFAULT_QUEUE

    def children(self, parent: str | None) -> list[str]:
        """The queues under ``parent`` (None: the root), by name."""
        return list(self._children.get(parent, []))

    def ancestors(self, name: str) -> list[str]:
        """``name`` and its ancestors, nearest first (a queue with errors has none)."""
        chain = [name]
        at = self._parent.get(name)
        while at is not None and at not in chain:
            chain.append(at)
            at = self._parent.get(at)
        return chain

    def _add(self, name: str, amounts: Mapping[str, int]) -> None:
        for at in self.ancestors(name):
            held = self.held[at]
            for resource, amount in amounts.items():
                held[resource] = held.get(resource, 0) + amount

    def take(self, queue: str, amounts: Mapping[str, int]) -> None:
        """Count what a committed turn placed in ``queue``."""
        name = self.name_of(queue)
        if name in self.queues:
            self._add(name, amounts)

    def leave(self, queue: str, amounts: Mapping[str, int]) -> None:
        """Count what an eviction in this pass will free in ``queue`` as leaving: still held
        against its capability until its pods are gone, no longer its share for reclaim."""
        name = self.name_of(queue)
        if name not in self.queues:
            return
        for at in self.ancestors(name):
            going = self.leaving[at]
            for resource, amount in amounts.items():
                going[resource] = going.get(resource, 0) + amount

    # -- fair shares ------------------------------------------------------------------------

    def _fill(self, parent: str | None, amounts: Mapping[str, float]) -> None:
        children = self._children.get(parent, [])
        if not children:
            return
        shares: dict[str, dict[str, float]] = {c: {} for c in children}
        for resource, amount in amounts.items():
            wants = (
                {c: float(self.demand[c].get(resource, 0)) for c in children}
                if self.demand is not None
                else None
            )
            for child, got in _water_fill(
                [self.queues[c] for c in children], resource=resource, amount=amount, wants=wants
            ).items():
                shares[child][resource] = got
        for child in children:
            self.fair[child] = shares[child]
            self._fill(child, shares[child])

    def share(self, queue: str) -> float:
        """The queue's dominant share: the most, over the resources, its subtree holds
        against its fair share (0: holds nothing; above 1: beyond its fair share)."""
        name = self.name_of(queue)
        fair = self.fair.get(name, {})
        held = self.held.get(name, {})
        most = 0.0
        for resource, amount in held.items():
            if amount <= 0 or resource not in self.total:
                continue
            deserved = fair.get(resource, 0.0)
            most = max(most, amount / deserved if deserved > 0 else math.inf)
        return most

    def standing(self, queue: str) -> float:
        """The share the fair order goes by: the dominant share, or with time-based fair
        share the most, over the resources, of the mean of what the subtree holds now and
        what it held on average lately, against its fair share: a queue that had the
        cluster for the last hours yields to one that had nothing, though both hold
        nothing now."""
        name = self.name_of(queue)
        if self.past is None:
            return self.share(name)
        fair = self.fair.get(name, {})
        held, past = self.held.get(name, {}), self.past.get(name, {})
        most = 0.0
        for resource in {*held, *past}:
            amount = (held.get(resource, 0) + past.get(resource, 0.0)) / 2
            if amount <= 0 or resource not in self.total:
                continue
            deserved = fair.get(resource, 0.0)
            if deserved > 0:
                most = max(most, amount / deserved)
            elif held.get(resource, 0) > 0:
                most = math.inf  # holds what it has no share of, as share() says
            # A past use of a resource it has no share of now (nobody wants it: shares are
            # capped by demand) says nothing of today (a trace of it would put the queue last
            # for good).
        return most

    def order(self, queue: str) -> tuple:
        """Sort key of a queue for the fair order: furthest below its share first, then the
        higher spec.priority, then by name."""
        name = self.name_of(queue)
        known = self.queues.get(name)
        return (self.standing(name), -(known.priority if known else 0), name)

    # -- reclaim ----------------------------------------------------------------------------

    def dominant(self, need: Mapping[str, int]) -> frozenset[str]:
        """The resources of ``need`` that are its largest part of the cluster (DRF's dominant
        resource), among the contended ones: what reclaim weighs shares in. A gang of GPUs
        with their CPU beside them is weighed in GPUs."""
        parts = {
            r: amount / self.total[r]
            for r, amount in need.items()
            if amount > 0 and self.total.get(r, 0) > 0 and self._counts(r)
        }
        if not parts:
            return frozenset()
        most = max(parts.values())
        return frozenset(r for r, part in parts.items() if part >= most - 1e-9)

    def below_fair(self, queue: str, more: Mapping[str, int]) -> bool:
        """Whether ``queue`` stays within its fair share with ``more``, in the resources that
        are ``more``'s dominant share of the cluster: reclaim gives a queue back its share,
        never more. Its ancestors are not asked: a parent above its share because of a
        sibling's flood is the very case of a child reclaiming from that sibling (the room
        moves inside the parent), and a victim in another subtree is protected by
        ``may_lose``, all the way up."""
        name = self.name_of(queue)
        fair = self.fair.get(name, {})
        return all(
            self._standing(name, resource) + more[resource] <= _whole(fair.get(resource, 0.0))
            for resource in self.dominant(more)
        )

    def _standing(self, name: str, resource: str) -> int:
        """What a queue's subtree holds of ``resource`` and keeps (not leaving)."""
        return self.held[name].get(resource, 0) - self.leaving[name].get(resource, 0)

    def _counts(self, resource: str) -> bool:
        return self.contended is None or resource in self.contended

    def may_lose(
        self,
        queue: str,
        amounts: Mapping[str, int],
        *,
        to: str,
        weighed: frozenset[str],
        lost: Mapping[str, Mapping[str, int]] | None = None,
    ) -> bool:
        """Whether ``queue`` may give ``amounts`` up to reclaim by queue ``to``: it and its
        ancestors (those that are not ``to``'s too) are reclaimable and stay at or above
        their fair share in the resources reclaim weighs (``weighed``: the reclaimer's
        dominant ones), and at or above their guarantee in every resource, after what the
        victims chosen before lose (``lost``, by queue, ancestors included)."""
        theirs = set(self.ancestors(self.name_of(to)))
        for at in self.ancestors(self.name_of(queue)):
            if at in theirs:
                break  # a common ancestor: moving room inside it changes nothing there
            known = self.queues[at]
            if not known.reclaimable:
                return False
            fair = self.fair.get(at, {})
            guarantee = known.guarantee or {}
            gone = (lost or {}).get(at, {})
            for resource, amount in amounts.items():
                left = self._standing(at, resource) - gone.get(resource, 0) - amount
                if amount <= 0:
                    continue
                if resource in weighed and left < _whole(fair.get(resource, 0.0)):
                    return False
                if left < guarantee.get(resource, 0):
                    return False
        return True

    def related(self, one: str, other: str) -> bool:
        """Whether one queue is the other or an ancestor of it (either way)."""
        a, b = self.name_of(one), self.name_of(other)
        return a in self.ancestors(b) or b in self.ancestors(a)

    # -- what holds a gang --------------------------------------------------------------------

    def problem(self, queue: str, *, namespace: str | None = None) -> tuple[str, str, str] | None:
        """Why a gang in ``queue`` (from ``namespace``, if given) may not start, as (event
        reason, message, the queue at fault when it is one that exists), or None."""
        name = self.name_of(queue)
        known = self.queues.get(name)
        if known is None:
            return (
                "QueueNotFound",
                f"queue {name!r} does not exist: create the Queue "
                "(scheduling.volcano.sh/v1beta1), or name an existing one",
                "",
            )
        for at in self.ancestors(name):
            if at in self.errors:
                whose = "" if at == name else f" (an ancestor of {name!r})"
                return (
                    "InvalidQueue",
                    f"queue {at!r}{whose} cannot be used: " + "; ".join(self.errors[at]),
                    at,
                )
            if not self.queues[at].open:
                whose = "" if at == name else f", an ancestor of queue {name!r},"
                return (
                    "QueueClosed",
                    f"queue {at!r}{whose} is {self.queues[at].state}: it takes no new gangs; "
                    "set its status.state to Open, or name another queue",
                    at,
                )
        if namespace is not None:
            return self._admits(name, namespace)
        return None

    def _admits(self, name: str, namespace: str) -> tuple[str, str, str] | None:
        """A queue and each of its ancestors admit only the namespaces their selectors match."""
        labels = self.namespaces.get(namespace, {})
        for at in self.ancestors(name):
            known = self.queues[at]
            if known.namespace_selector is None or selector_matches(
                known.namespace_selector, labels
            ):
                continue
            whose = "" if at == name else f", an ancestor of queue {name!r},"
            shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
            return (
                "NamespaceNotAllowed",
                f"queue {at!r}{whose} admits gangs only from namespaces matching "
                f"{known.namespace_selector_text!r} ({names.QUEUE_NAMESPACE_SELECTOR}); "
                f"namespace {namespace!r} (labels: {shown}) does not match: label the "
                "namespace, or name a queue it may use",
                at,
            )
        return None

    def limits(self, queue: str) -> list[tuple[str, str, float]]:
        """The capabilities that bound ``queue`` (its own and its ancestors'): (queue,
        resource, room left)."""
        found = []
        for at in self.ancestors(self.name_of(queue)):
            capability = self.queues[at].capability
            if capability is None:
                continue
            held = self.held[at]
            for resource, cap in capability.items():
                found.append((at, resource, cap - held.get(resource, 0)))
        return found

    def kept_for_others(self, queue: str) -> dict[str, tuple[float, str]]:
        """Per resource, how much of the free room other queues' guarantees keep (what they
        hold below their guarantee), and the first such queue, for messages."""
        own = self.name_of(queue)
        mine = set(self.ancestors(own))
        kept: dict[str, tuple[float, str]] = {}
        for name, known in sorted(self.queues.items()):
            guarantee = known.guarantee
            if guarantee is None or name in mine or name in self.errors:
                continue
            chain = self.ancestors(name)
            if own in chain:
                continue  # a queue inside our own subtree: its room is ours to use
            if any(self.queues[a].guarantee is not None for a in chain[1:] if a not in mine):
                continue  # its guaranteed ancestor counts for it
            held = self.held[name]
            for resource, amount in guarantee.items():
                unmet = amount - held.get(resource, 0)
                if unmet > 0:
                    before, first = kept.get(resource, (0.0, name))
                    kept[resource] = (before + unmet, first)
        return kept


def decayed_usage(
    before: QueueUsage | None,
    held: Mapping[str, Mapping[str, int]],
    *,
    now: float,
    half_life: float,
) -> QueueUsage:
    """The queues' recent usage at ``now``: the average ``before`` decayed by half for every
    ``half_life`` seconds since, and for the rest what each queue held at the last update
    (held, as far as the core knows, through the gap: passes run when something changed,
    so what is held now has mostly just begun); what is held now is kept for the next
    (so that the next gap counts at what was held in it, not at what is held after it)."""
    now_held = {q: {r: float(a) for r, a in amounts.items()} for q, amounts in held.items()}
    if before is None:
        return QueueUsage(now, now_held, now_held)
    kept = 0.5 ** (max(now - before.at, 0.0) / half_life) if half_life > 0 else 0.0
    average: dict[str, dict[str, float]] = {}
    for queue in {*before.average, *before.held}:
        old, then = before.average.get(queue, {}), before.held.get(queue, {})
        mixed = {r: kept * old.get(r, 0.0) + (1 - kept) * then.get(r, 0.0) for r in {*old, *then}}
        kept_amounts = {r: a for r, a in mixed.items() if a > 1e-9}
        if kept_amounts:
            average[queue] = kept_amounts
    return QueueUsage(now, average, now_held)


def _whole(share: float) -> float:
    """A fair share to the nearest whole unit, as reclaim compares it with what queues hold:
    a share of 16.9999 GPUs from the water filling is 17 GPUs."""
    return math.floor(share + 0.5)


def _water_fill(
    children: list[Queue],
    *,
    resource: str,
    amount: float,
    wants: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Split ``amount`` of one resource among sibling queues: each gets its guarantee, a
    queue stating ``deserved`` for it gets that, the rest is split by weight, none beyond
    its capability nor, where ``wants`` says, beyond what it wants (Volcano's proportion
    plugin, per resource)."""

    def cap(queue: Queue) -> float:
        limit = math.inf
        if queue.capability is not None and resource in queue.capability:
            limit = float(queue.capability[resource])
        if wants is not None:
            limit = min(limit, max(wants.get(queue.name, 0.0), 0.0))
        return limit

    got: dict[str, float] = {}
    for queue in children:
        floor = float(queue.guarantee.get(resource, 0)) if queue.guarantee is not None else 0.0
        if queue.deserved is not None and resource in queue.deserved:
            floor = max(floor, float(queue.deserved[resource]))
        got[queue.name] = min(floor, cap(queue))
    remaining = amount - sum(got.values())
    active = [
        q
        for q in children
        if not (q.deserved is not None and resource in q.deserved) and got[q.name] < cap(q)
    ]
    while remaining > 1e-9 and active:
        weights = sum(q.weight for q in active)
        given = 0.0
        still = []
        for queue in active:
            offer = remaining * queue.weight / weights
            room = cap(queue) - got[queue.name]
            take = min(offer, room)
            got[queue.name] += take
            given += take
            if take < offer:
                continue  # at its capability: out of the next round
            still.append(queue)
        remaining -= given
        if len(still) == len(active):
            break  # everyone took its whole offer: nothing left to split
        active = still
    return got


class QueueRoom:
    """The room a GangGroup's turn may take in each queue: what the capabilities along its
    path leave, and the free room other queues' guarantees do not keep. One per turn (after
    gang members and the group's attempt share it), a listener of the turn's Statement: what
    it allocates counts here, what it undoes is given back; counted in the book once
    committed. A trial of victims gives theirs back
    (``give``): a gang may preempt its own queue's gangs to get under its capability."""

    def __init__(
        self,
        book: QueueBook,
        *,
        free: Callable[[], Mapping[str, int]],
        amounts: Callable[[Pod], Mapping[str, int]] = lambda pod: pod.requests,
    ) -> None:
        self.book = book
        self._free = free  # the cluster's free room, asked for only where a guarantee is kept
        self._amounts = amounts  # what a pod counts for in its queue (its devices included)
        self._taken: dict[str, dict[str, int]] = {}  # by queue: placed (+) or freed (-) here
        # The free room, read once when a guarantee is first weighed, and what this turn had
        # placed by then (on the ledger already: not to be taken off the free room again).
        self._free_then: Mapping[str, int] | None = None
        self._placed: dict[str, int] = {}
        self._placed_then: dict[str, int] = {}
        self._kept: dict[str, dict[str, tuple[float, str]]] = {}

    def _taken_under(self, queue: str) -> dict[str, int]:
        """What this turn placed in (less what it freed from) ``queue``'s subtree."""
        total: dict[str, int] = {}
        for name, amounts in self._taken.items():
            if queue in self.book.ancestors(name):
                for resource, amount in amounts.items():
                    total[resource] = total.get(resource, 0) + amount
        return total

    def refuse(
        self,
        queue: str,
        requests: Mapping[str, int],
        *,
        held: Mapping[str, int] | None = None,
        guarantees: bool = True,
    ) -> str:
        """Why ``requests`` may not go to ``queue`` now ("" if they may). ``held``: room the
        gang holds on the ledger already (NonStrict holds): it counts against a capability,
        not against the free room. ``guarantees``: whether other queues' guarantees are
        weighed (not before a trial of victims, whose ledger has the room they free)."""
        book = self.book
        name = book.name_of(queue)
        held = held or {}
        for at, resource, room in book.limits(name):
            want = requests.get(resource, 0) + held.get(resource, 0)
            if want <= 0:
                continue
            left = room - self._taken_under(at).get(resource, 0)
            if want > left:
                cap = book.queues[at].capability[resource]  # type: ignore[index]
                used = cap - left
                whose = f"queue {at}" if at == name else f"queue {at} (an ancestor of {name})"
                if left <= 0:
                    return (
                        f"{whose} is at its capability for {resource}: "
                        f"{_amount(resource, used)} of {_amount(resource, cap)}"
                    )
                return (
                    f"{whose} would go over its capability for {resource}: it holds "
                    f"{_amount(resource, used)} of {_amount(resource, cap)}, and "
                    f"{_amount(resource, want)} more are asked"
                )
        if not guarantees:
            return ""
        kept = self._kept.get(name)
        if kept is None:
            kept = self._kept[name] = book.kept_for_others(name)
        if not kept:
            return ""
        if self._free_then is None:
            self._free_then = self._free()
            self._placed_then = dict(self._placed)
        for resource, (reserved, first) in sorted(kept.items()):
            want = requests.get(resource, 0)
            since = self._placed.get(resource, 0) - self._placed_then.get(resource, 0)
            free = self._free_then.get(resource, 0) - since
            if want > 0 and want > free - reserved:
                return (
                    f"the free {resource} is kept for other queues' guarantees: "
                    f"{_amount(resource, free)} free, {_amount(resource, reserved)} of it "
                    f"guaranteed to queues such as {first} that hold less than their "
                    "spec.guarantee"
                )
        return ""

    def take(self, queue: str, requests: Mapping[str, int], *, placed: bool = True) -> None:
        """Count ``requests`` in ``queue`` for this turn; ``placed``: they were put on the
        ledger now (not held there from before)."""
        taken = self._taken.setdefault(self.book.name_of(queue), {})
        for resource, amount in requests.items():
            taken[resource] = taken.get(resource, 0) + amount
            if placed:
                self._placed[resource] = self._placed.get(resource, 0) + amount

    def untake(self, queue: str, requests: Mapping[str, int], *, placed: bool = True) -> None:
        """Undo a ``take`` (what it placed, undone on the ledger too)."""
        taken = self._taken.setdefault(self.book.name_of(queue), {})
        for resource, amount in requests.items():
            taken[resource] = taken.get(resource, 0) - amount
            if placed:
                self._placed[resource] = self._placed.get(resource, 0) - amount

    # As a listener of the turn's Statement: what it allocates in a queue, and the room a
    # gang holds from before that it counts, are taken; what it undoes is given back.

    def done(self, op: Operation) -> None:
        if op.queue is None:
            return
        if op.kind is Kind.ALLOCATE:
            self.take(op.queue, self._amounts(op.pod))  # type: ignore[arg-type]
        elif op.kind is Kind.COUNT:
            self.take(op.queue, op.amounts or {}, placed=False)

    def undone(self, op: Operation) -> None:
        if op.queue is None:
            return
        if op.kind is Kind.ALLOCATE:
            self.untake(op.queue, self._amounts(op.pod))  # type: ignore[arg-type]
        elif op.kind is Kind.COUNT:
            self.untake(op.queue, op.amounts or {}, placed=False)

    def give(self, queue: str, requests: Mapping[str, int]) -> None:
        """Count ``requests`` as leaving ``queue`` (a trial's victims): under its capability
        again. The free room is the trial ledger's, where they are gone already."""
        taken = self._taken.setdefault(self.book.name_of(queue), {})
        for resource, amount in requests.items():
            taken[resource] = taken.get(resource, 0) - amount


def queue_statuses(
    queues: Mapping[str, Queue],
    *,
    census: QueueCensus,
    observed: Mapping[str, QueueStatus],
) -> dict[str, QueueStatus]:
    """The status each Queue should show: what its subtree holds, its gangs waiting and
    running, and its state (Open where none was set; Closing becomes Closed once nothing of
    it waits or runs, as Volcano's queue controller does)."""
    held = {(name or DEFAULT_QUEUE): amounts for name, amounts in census.held.items()}
    running = {(name or DEFAULT_QUEUE): n for name, n in census.running.items()}
    pending = {(name or DEFAULT_QUEUE): n for name, n in census.pending.items()}
    book = QueueBook(queues, usage=held, total={})
    statuses = {}
    for name in queues:
        seen = observed.get(name, QueueStatus())
        state = seen.state or OPEN
        if state == "Closing" and not running.get(name) and not pending.get(name):
            state = CLOSED
        statuses[name] = QueueStatus(
            state=state,
            allocated=Resources({r: a for r, a in book.held[name].items() if a > 0}),
            pending=pending.get(name, 0),
            running=running.get(name, 0),
        )
    return statuses
