"""A Statement: the operations one GangGroup's turn makes on the pass's ledger, kept as a
log so that they can be committed together or undone together (Volcano's ``Statement``).

A turn allocates its members (and, for a NonStrict gang that falls short, keeps them as
holds; preemption will evict). If the group cannot be placed whole, ``discard`` undoes every
operation in reverse, and the capacity is exactly as before the turn; ``commit`` keeps them
and hands back the log. Nothing leaves the pass unless committed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from scheduler.core.placing import Ledger
from scheduler.model.devices import Allocation
from scheduler.model.pods import Pod


class Kind(Enum):
    ALLOCATE = "allocate"  # the pod is to be bound to the node
    HOLD = "hold"  # a NonStrict reservation: the node's room is kept, nothing is bound
    EVICT = "evict"  # the pod is to leave the node, its room freed
    CLAIM = "claim"  # a claim shared by members is allocated before they are placed


@dataclass(frozen=True, slots=True)
class Operation:
    kind: Kind
    pod: Pod | None
    node: str
    claim: tuple[str, str] | None = None


class Statement:
    """The operation log of one turn over ``ledger``. ``on_discard`` runs after an undo (the
    node finder's cursors assume capacity only shrinks, so they must be rewound)."""

    def __init__(self, ledger: Ledger, *, on_discard: Callable[[], None] = lambda: None) -> None:
        self.ledger = ledger
        self._on_discard = on_discard
        self._operations: list[Operation] = []

    def allocate(self, pod: Pod, node: str) -> None:
        self.ledger.place(pod, node)
        self._operations.append(Operation(Kind.ALLOCATE, pod, node))

    def hold(self, pod: Pod, node: str) -> None:
        self.ledger.place(pod, node, strict=False)
        self._operations.append(Operation(Kind.HOLD, pod, node))

    def claim(self, key: tuple[str, str], allocation: Allocation) -> None:
        """Allocate a claim the gang's members share before any of them is placed."""
        self.ledger.preallocate(key, allocation)
        self._operations.append(Operation(Kind.CLAIM, None, "", key))

    def evict(self, pod: Pod, node: str) -> None:
        self.ledger.give(node, pod.requests)
        self._operations.append(Operation(Kind.EVICT, pod, node))

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(self._operations)

    def discard(self) -> None:
        """Undo every operation, last first."""
        self.undo_to(0)

    def mark(self) -> int:
        """Where the log is now: ``undo_to`` it undoes what came after (a subgroup that
        fell short, inside a gang's attempt)."""
        return len(self._operations)

    def undo_to(self, mark: int) -> None:
        """Undo the operations after ``mark``, last first."""
        undone = self._operations[mark:]
        for op in reversed(undone):
            if op.kind is Kind.CLAIM:
                self.ledger.unallocate(op.claim)
            elif op.kind is Kind.EVICT:
                self.ledger.take(op.node, op.pod.requests)
            else:
                self.ledger.unplace(op.pod, op.node)
        del self._operations[mark:]
        if undone:
            self._on_discard()

    def commit(self) -> tuple[Operation, ...]:
        """Keep every operation; the log is handed back and the statement is empty again."""
        done = tuple(self._operations)
        self._operations.clear()
        return done
