"""ReadWriteOncePod: a claim with that access mode is used by one pod in the whole cluster at
a time (kube-scheduler's VolumeRestrictions).

A pod naming such a claim (by ``persistentVolumeClaim``; a generic ephemeral volume's claim
is its own anyway) fits nowhere while another scheduled pod uses it: not only on that pod's
node. Preemption can free it, by evicting the pod that uses it, as kube-scheduler's
RemovePod does. A gang two of whose members name one such claim never fits.

``ExclusiveClaims`` is what the snapshot says (which claims are exclusive, and how many of
the pods in the nodes' infos use each); an ``ExclusiveLayer`` is a ledger's book of what its
placements and evictions changed, over its parent's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from scheduler.model.nodes import Node, NodeInfo
from scheduler.model.pods import Pod
from scheduler.model.volumes import Claim

CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already "
    "in-use by another pod"
)


def named_claims(pod: Pod) -> Iterable[str]:
    """The claims ``pod`` names by ``persistentVolumeClaim`` (as kube-scheduler counts a
    claim's users)."""
    return (name for name in pod.claims if name not in pod.ephemeral_claims)


class ExclusiveClaims:
    """The ReadWriteOncePod claims of the snapshot, and how many scheduled pods use each."""

    def __init__(self, exclusive: frozenset[tuple[str, str]], users: Counter) -> None:
        self.exclusive = exclusive
        self.users = users

    @classmethod
    def of(
        cls,
        claims: Mapping[tuple[str, str], Claim],
        infos: Mapping[str, NodeInfo],
        *,
        placing: Iterable[Pod],
    ) -> ExclusiveClaims | None:
        """The ReadWriteOncePod claims the pods ``placing`` name, and their users; None
        where they name none: the pass keeps no such book (and counts no pod's claims)."""
        if not claims:
            return None  # a cluster without claims looks at no pod for them
        exclusive = frozenset(
            key
            for pod in placing
            if pod.claims
            for key in _keys(pod)
            if (claim := claims.get(key)) is not None and claim.exclusive
        )
        if not exclusive:
            return None
        users: Counter = Counter()
        for info in infos.values():
            for pod in info.pods:
                if pod.claims:
                    for key in _keys(pod):
                        if key in exclusive:
                            users[key] += 1
        return cls(exclusive, users)

    def of_pod(self, pod: Pod) -> tuple[tuple[str, str], ...]:
        """The exclusive claims ``pod`` names."""
        return tuple(key for key in _keys(pod) if key in self.exclusive)


def _keys(pod: Pod) -> Iterable[tuple[str, str]]:
    return ((pod.ref.namespace, name) for name in named_claims(pod))


class ExclusiveLayer:
    """How many more (or fewer) pods use each exclusive claim on this ledger than on its
    parent's: placements add a user, evictions and set-asides take one away."""

    def __init__(self, world: ExclusiveClaims, parent: ExclusiveLayer | None = None) -> None:
        self.world = world
        self._parent = parent
        self._delta: Counter = Counter()

    def child(self) -> ExclusiveLayer:
        return ExclusiveLayer(self.world, self)

    def asks(self, pod: Pod) -> bool:
        return bool(pod.claims) and bool(self.world.of_pod(pod))

    def users(self, key: tuple[str, str]) -> int:
        layer: ExclusiveLayer | None = self
        count = self.world.users.get(key, 0)
        while layer is not None:
            count += layer._delta.get(key, 0)
            layer = layer._parent
        return count

    def reasons(self, pod: Pod, node: Node) -> tuple[str, ...]:
        """The same on every node: another pod uses one of its claims."""
        if any(self.users(key) > 0 for key in self.world.of_pod(pod)):
            return (CONFLICT,)
        return ()

    def place(self, pod: Pod, node: Node) -> str:
        """``pod`` uses its exclusive claims; returns why it may not ("" if it may). A hold
        is recorded even where it may not, as its room is: undone the same way."""
        why = self.reasons(pod, node)
        self._add(pod, +1)
        return why[0] if why else ""

    def unplace(self, pod: Pod, node: str) -> None:
        self._add(pod, -1)

    def evict(self, pod: Pod) -> None:
        """A victim going frees its exclusive claims for the pods placed after."""
        self._add(pod, -1)

    def unevict(self, pod: Pod) -> None:
        self._add(pod, +1)

    def set_aside(self, pod: Pod, node: str) -> None:
        """A preemptor's own held member uses its claims no more, on this layer."""
        self._add(pod, -1)

    def _add(self, pod: Pod, sign: int) -> None:
        for key in self.world.of_pod(pod):
            self._delta[key] += sign

    def commit(self) -> None:
        parent = self._parent
        if parent is None:
            raise ValueError("only a child layer can be committed")
        parent._delta.update(self._delta)
        self._delta = Counter()
