"""The tree of queues, checked (#22): what is wrong with each queue, in words that say what
to do. A queue with a problem takes no new gangs and its gangs say why (next steps); the rest
of the tree goes on. Pure: from the queues as read to errors per queue name."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.model.queues import Queue
from scheduler.model.resources import Resources

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
