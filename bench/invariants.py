"""What every scheduler of ``make bench`` must keep while it is timed, checked from the bind
watch: no gang partly bound for longer than a stated bound (nor any at the end), and no node
given more than it has. KWOK does not enforce capacity, and a run that broke either would
still print its figures: with this check it fails instead, naming the scheduler and the gang
or node.

A gang is partly bound, for a moment, in every scheduler: its members' binds are separate
POSTs. ``partial_limit`` bounds that moment; ``longest_partial_seconds`` reports the longest
seen, so the bound can be read against what each scheduler needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.codecs.objects import pod_requests, resource_list

# A gang's binds are separate POSTs, queued behind other gangs' at the bind concurrency and
# the API server's latency under a backlog; measured on 2 cores at 1,000 nodes, the longest
# was well under a second for every scheduler (bench/results/). Five seconds leaves room for
# a slow machine and still catches a scheduler that binds part of a gang and waits.
PARTIAL_LIMIT_SECONDS = 5.0


def requests_of(pod: dict) -> dict[str, int]:
    """A pod's requests as kube-scheduler counts them against a node (containers, init
    containers and sidecars, pod-level requests, overhead, one ``pods``): the scheduler's own
    codec, which ``make oracle`` checks against kube-scheduler."""
    return dict(pod_requests(pod.get("spec") or {}))


def allocatable_of(node: dict) -> dict[str, int]:
    """A Node manifest's allocatable, in our base units."""
    return dict(resource_list((node.get("status") or {}).get("allocatable")))


@dataclass
class Invariants:
    """Fed every pod the watch sees bound (and every pod deleted); says what was broken.

    ``gangs`` maps each gang to its members and ``minimum`` to how many of them must be bound
    together (a gang of one is never partial); ``allocatable`` is every node's."""

    allocatable: dict[str, dict[str, int]]
    gangs: dict[str, list[str]]
    minimum: dict[str, int]
    partial_limit: float = PARTIAL_LIMIT_SECONDS
    broken: list[str] = field(default_factory=list)
    _gang_of: dict[str, str] = field(default_factory=dict)
    _node_of: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    _used: dict[str, dict[str, int]] = field(default_factory=dict)
    _first: dict[str, float] = field(default_factory=dict)
    _whole: dict[str, float] = field(default_factory=dict)
    _count: dict[str, int] = field(default_factory=dict)
    _overcommitted: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._gang_of = {pod: gang for gang, pods in self.gangs.items() for pod in pods}

    def add_gang(self, gang: str, members: list[str], *, minimum: int) -> None:
        """A gang created after the check began (a soak's arrivals)."""
        self.gangs[gang] = members
        self.minimum[gang] = minimum
        for pod in members:
            self._gang_of[pod] = gang

    def bound(self, pod: str, *, node: str, requests: dict[str, int], at: float) -> None:
        """``pod`` seen on ``node`` at ``at`` (seconds); a pod seen bound again is ignored."""
        if pod in self._node_of:
            return
        self._node_of[pod] = (node, requests)
        used = self._used.setdefault(node, {})
        has = self.allocatable.get(node)
        for name, amount in requests.items():
            used[name] = used.get(name, 0) + amount
        if has is None:
            self.broken.append(f"pod {pod} bound to {node}, a node that does not exist")
        elif node not in self._overcommitted:
            over = [
                f"{name} {used[name]} of {has.get(name, 0)}"
                for name in sorted(requests)
                if requests[name] and used[name] > has.get(name, 0)
            ]
            if over:
                self._overcommitted.add(node)
                self.broken.append(
                    f"node {node} overcommitted by pod {pod}: requests {', '.join(over)} "
                    "allocatable (cpu in millicores)"
                )
        gang = self._gang_of.get(pod)
        if gang is None:
            return
        self._first.setdefault(gang, at)
        self._count[gang] = self._count.get(gang, 0) + 1
        if self._count[gang] >= self.minimum.get(gang, 1) and gang not in self._whole:
            self._whole[gang] = at
            if at - self._first[gang] > self.partial_limit:
                self.broken.append(
                    f"gang {gang} partly bound for {at - self._first[gang]:.1f} s "
                    f"(more than {self.partial_limit:g} s) before its minimum "
                    f"{self.minimum.get(gang, 1)} was bound"
                )

    def deleted(self, pod: str) -> None:
        """A pod gone: its node's room is free again (a bound gang member deleted stays
        counted for its gang: the gang was whole once)."""
        if (held := self._node_of.pop(pod, None)) is None:
            return
        node, requests = held
        for name, amount in requests.items():
            self._used[node][name] -= amount

    def whole(self, gang: str) -> bool:
        """Whether ``gang`` has had its minimum bound together."""
        return gang in self._whole

    def partly_bound(self) -> list[str]:
        """The gangs with some but not all of their minimum bound now."""
        return [g for g in self._first if g not in self._whole]

    def longest_partial_seconds(self, *, now: float) -> float:
        """The longest a gang was partly bound: until whole, or until ``now``."""
        spans = [self._whole.get(g, now) - first for g, first in self._first.items()]
        return round(max(spans, default=0.0), 3)

    def check(self, *, now: float) -> list[str]:
        """Everything broken so far, with every gang still partly bound at ``now`` (at the
        end of a workload, none may be)."""
        partial = sorted(g for g in self._first if g not in self._whole)
        return self.broken + [
            f"gang {g} partly bound at the end: {self._count[g]} of its minimum "
            f"{self.minimum.get(g, 1)} bound, since {now - self._first[g]:.1f} s"
            for g in partial
        ]
