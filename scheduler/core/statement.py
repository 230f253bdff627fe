"""A Statement: the one record of what a turn changed, so that it can be kept whole or
undone whole (Volcano's ``Statement``, whose events plugins subscribe to).

Every change a turn makes is an operation on it: a member allocated to a node, room held
there (a NonStrict hold, a preemptor's nominated room, a starving gang's), a victim evicted,
a shared claim allocated, room counted in a queue, a decision made (a binding, an event, a
patch, ...), a gang's outcome changed. ``undo_to(mark)`` undoes what came after a mark, last
first; ``discard`` undoes it all; ``commit`` keeps it and starts a new record.

What depends on these changes follows them as a listener rather than being marked and
rewound by hand: the ledger is changed by the Statement itself, the queues' room of the turn
counts what is allocated in them, the node finder's cursors go back to where they stood at a
mark when what followed it is undone, and the session streams the bindings a commit keeps.
A listener is any object with some of ``done(op)``, ``undone(op)``, ``marked(mark)``,
``undone_to(mark)`` and ``committed(ops)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, NamedTuple

from scheduler.core.placing import Ledger
from scheduler.model.devices import Allocation
from scheduler.model.pods import Pod


class Kind(Enum):
    ALLOCATE = "allocate"  # the pod is to be bound to the node
    HOLD = "hold"  # the node's room is kept for the pod, nothing is bound
    EVICT = "evict"  # the pod is to leave the node, its room freed
    RELEASE = "release"  # room held for the pod before the turn is given back
    CLAIM = "claim"  # a claim shared by members is allocated before they are placed
    COUNT = "count"  # room the gang holds from before counted in its queue for this turn
    DECIDE = "decide"  # decisions appended to one of the session's lists
    SET = "set"  # a field of an object (a gang's outcome) changed
    CHANGE = "change"  # some other state changed, with how to put it back


class Operation(NamedTuple):
    """One change of a turn (a tuple: a turn makes thousands, and they are short-lived)."""

    kind: Kind
    pod: Pod | None = None
    node: str = ""
    claim: tuple[str, str] | None = None
    # The queue an allocation or a count is in (None: counted in none; "" is the default).
    queue: str | None = None
    amounts: Mapping[str, int] | None = None  # COUNT: how much
    # DECIDE: (the list, where the decisions start in it, the decisions); SET: (the object,
    # the field, its old value); a change of another kind: its undo, a callable.
    what: Any = None


# What a listener may have, in the order of the Statement's lists; per listener class, the
# hooks it has (a turn subscribes two listeners, and a pass opens thousands of turns).
_HOOK_NAMES = ("done", "undone", "marked", "undone_to", "committed")
_HOOKS: dict[type, tuple[str, ...]] = {}


class Statement:
    """The operation log of one turn over ``ledger``."""

    __slots__ = ("_committed", "_done", "_marked", "_operations", "_undone", "_undone_to", "ledger")

    def __init__(self, ledger: Ledger, *listeners: object) -> None:
        self.ledger = ledger
        self._operations: list[Operation] = []
        self._done: list[Callable[[Operation], None]] = []
        self._undone: list[Callable[[Operation], None]] = []
        self._marked: list[Callable[[int], None]] = []
        self._undone_to: list[Callable[[int], None]] = []
        self._committed: list[Callable[[tuple[Operation, ...]], None]] = []
        for listener in listeners:
            self.subscribe(listener)

    def subscribe(self, listener: object) -> None:
        """Tell ``listener`` of every operation from now on (and of the mark it starts at)."""
        hooks = _HOOKS.get(type(listener))
        if hooks is None:
            hooks = _HOOKS[type(listener)] = tuple(
                name for name in _HOOK_NAMES if hasattr(listener, name)
            )
        for name in hooks:
            getattr(self, f"_{name}").append(getattr(listener, name))
        if "marked" in hooks:
            listener.marked(len(self._operations))  # type: ignore[attr-defined]

    def _log(self, op: Operation) -> None:
        self._operations.append(op)
        for done in self._done:
            done(op)

    # -- what a turn does -----------------------------------------------------------------

    def allocate(self, pod: Pod, node: str, *, queue: str | None = None) -> None:
        """Place ``pod`` on ``node``, to be bound; ``queue``: the queue it counts in."""
        self.ledger.place(pod, node)
        self._log(Operation(Kind.ALLOCATE, pod, node, queue=queue))

    def hold(self, pod: Pod, node: str) -> None:
        """Keep ``node``'s room for ``pod`` without binding it."""
        self.ledger.place(pod, node, strict=False)
        self._log(Operation(Kind.HOLD, pod, node))

    def claim(self, key: tuple[str, str], allocation: Allocation) -> None:
        """Allocate a claim the gang's members share before any of them is placed."""
        self.ledger.preallocate(key, allocation)
        self._log(Operation(Kind.CLAIM, claim=key))

    def evict(self, pod: Pod, node: str) -> None:
        self.ledger.evict(pod, node)
        self._log(Operation(Kind.EVICT, pod, node))

    def release(self, pod: Pod, node: str) -> None:
        """Give back room this pass held for ``pod`` on ``node`` before the turn (a
        preemptor's nominated room, its to use again)."""
        self.ledger.unplace(pod, node)
        self._log(Operation(Kind.RELEASE, pod, node))

    def count(self, queue: str, amounts: Mapping[str, int]) -> None:
        """Count room the gang holds on the ledger already (from an earlier pass) in its
        queue for this turn."""
        self._log(Operation(Kind.COUNT, queue=queue, amounts=amounts))

    def decide(self, into: list, start: int, items: tuple) -> None:
        """Decisions ``items`` were appended to ``into`` at ``start``; undoing deletes them."""
        self._log(Operation(Kind.DECIDE, what=(into, start, items)))

    def field(self, obj: object, name: str, old: object) -> None:
        """``obj.name`` was changed from ``old``; undoing puts it back."""
        self._log(Operation(Kind.SET, what=(obj, name, old)))

    def changed(self, *, undo: Callable[[], None]) -> None:
        """Some other state of the turn changed; ``undo`` puts it back."""
        self._log(Operation(Kind.CHANGE, what=undo))

    # -- keeping it or not ----------------------------------------------------------------

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(self._operations)

    def mark(self) -> int:
        """Where the log is now: ``undo_to`` it undoes what came after (a subgroup that
        fell short, inside a gang's attempt)."""
        mark = len(self._operations)
        for marked in self._marked:
            marked(mark)
        return mark

    def undo_to(self, mark: int) -> None:
        """Undo the operations after ``mark``, last first."""
        undone = self._operations[mark:]
        if not undone:
            return
        del self._operations[mark:]
        ledger = self.ledger
        for op in reversed(undone):
            kind = op.kind
            if kind is Kind.ALLOCATE or kind is Kind.HOLD:
                ledger.unplace(op.pod, op.node)
            elif kind is Kind.EVICT:
                ledger.unevict(op.pod, op.node)  # type: ignore[arg-type]
            elif kind is Kind.RELEASE:
                ledger.place(op.pod, op.node, strict=False)  # type: ignore[arg-type]
            elif kind is Kind.CLAIM:
                ledger.unallocate(op.claim)  # type: ignore[arg-type]
            elif kind is Kind.SET:
                obj, name, old = op.what
                object.__setattr__(obj, name, old)
            elif kind is Kind.DECIDE:
                into, start, _ = op.what
                del into[start:]
            elif kind is Kind.CHANGE:
                op.what()
            for listener in self._undone:
                listener(op)
        for listener in self._undone_to:
            listener(mark)

    def discard(self) -> None:
        """Undo every operation, last first."""
        self.undo_to(0)

    def commit(self) -> tuple[Operation, ...]:
        """Keep every operation; the log is handed back (and told to the listeners) and the
        statement is empty again, at a new first mark (nothing to tell if it was empty)."""
        if not self._operations:
            return ()
        done = tuple(self._operations)
        self._operations.clear()
        for committed in self._committed:
            committed(done)
        for marked in self._marked:
            marked(0)
        return done
