"""Volcano's Queue objects (``scheduling.volcano.sh/v1beta1``) to ``model.queues.Queue``.

A malformed value never raises: it becomes an error naming the field and what is allowed.
The API server checks little of a Queue (Volcano's webhook does the rest, and it may not be
installed beside us), so weights, quantities and states are checked here.
"""

from __future__ import annotations

from scheduler.codecs.objects import resource_errors, resource_list
from scheduler.codecs.selectors import parse_selector
from scheduler.codecs.shapes import obj, text, whole
from scheduler.model import names
from scheduler.model.queues import CLOSED, OPEN, Queue, QueueStatus
from scheduler.model.resources import Resources, format_amount

INT32_MAX = 2**31 - 1
_STATES = {"Open": OPEN, "Closed": CLOSED, "Closing": CLOSED, "Unknown": OPEN, "": OPEN}


def _resources(raw: object, field: str, errors: list[str]) -> Resources | None:
    if raw is None:
        return None
    errors.extend(resource_errors(raw, field))
    return resource_list(raw)


def queue_from_dict(raw: object) -> Queue:
    body = obj(raw)
    meta, spec, status = obj(body.get("metadata")), obj(body.get("spec")), obj(body.get("status"))
    errors: list[str] = []
    weight = whole(spec.get("weight"))
    if spec.get("weight") is None:
        weight = 1
    elif weight is None or not 1 <= weight <= INT32_MAX:
        errors.append(
            f"spec.weight must be a whole number from 1 to {INT32_MAX}, got {spec.get('weight')!r}"
        )
        weight = 1
    priority = whole(spec.get("priority"))
    if spec.get("priority") is not None and (priority is None or abs(priority) > INT32_MAX):
        errors.append(f"spec.priority must be a 32-bit whole number, got {spec.get('priority')!r}")
        priority = None
    reclaimable = spec.get("reclaimable")
    if reclaimable is not None and not isinstance(reclaimable, bool):
        errors.append(f"spec.reclaimable must be true or false, got {reclaimable!r}")
        reclaimable = None
    state = text(status.get("state"))
    if state not in _STATES:
        errors.append(f"status.state must be Open, Closed, Closing or Unknown, got {state!r}")
    guarantee = obj(spec.get("guarantee")).get("resource")
    selector, written = None, obj(meta.get("annotations")).get(names.QUEUE_NAMESPACE_SELECTOR)
    if written is not None:
        selector, error = parse_selector(text(written))
        if error:
            errors.append(f"annotation {names.QUEUE_NAMESPACE_SELECTOR}: {error}")
    return Queue(
        name=text(meta.get("name")),
        uid=text(meta.get("uid")),
        parent=text(spec.get("parent")),
        weight=weight,
        capability=_resources(spec.get("capability"), "spec.capability", errors),
        deserved=_resources(spec.get("deserved"), "spec.deserved", errors),
        guarantee=_resources(guarantee, "spec.guarantee.resource", errors),
        reclaimable=reclaimable if reclaimable is not None else True,
        priority=priority or 0,
        state=_STATES.get(state, OPEN),
        errors=tuple(errors),
        namespace_selector=selector,
        namespace_selector_text=text(written),
    )


def _count(raw: object) -> int:
    found = whole(raw)
    return found if found is not None and found >= 0 else 0


def queue_status_from_dict(raw: object) -> QueueStatus:
    """The status a Queue shows (what we compare with before writing it again)."""
    status = obj(obj(raw).get("status"))
    allocated = status.get("allocated")
    return QueueStatus(
        state=text(status.get("state")),
        allocated=resource_list(allocated) if not resource_errors(allocated, "") else Resources(),
        pending=_count(status.get("pending")),
        running=_count(status.get("running")),
    )


def queue_status_patch(status: QueueStatus, *, before: QueueStatus) -> dict[str, object]:
    """The JSON merge patch that takes a Queue's status from ``before`` to ``status``: a
    resource no longer held is removed from ``allocated``, not left at its last amount."""
    allocated: dict[str, object] = {r: None for r in before.allocated if r not in status.allocated}
    allocated.update((r, format_amount(r, a)) for r, a in sorted(status.allocated.items()))
    body: dict[str, object] = {
        "state": status.state,
        "pending": status.pending,
        "running": status.running,
    }
    if allocated:
        body["allocated"] = allocated
    return {"status": body}
