"""Volcano's Queue objects (``scheduling.volcano.sh/v1beta1``) to ``model.queues.Queue``.

A malformed value never raises: it becomes an error naming the field and what is allowed.
The API server checks little of a Queue (Volcano's webhook does the rest, and it may not be
installed beside us), so weights, quantities and states are checked here.
"""

from __future__ import annotations

from scheduler.codecs.objects import resource_errors, resource_list
from scheduler.codecs.shapes import obj, text, whole
from scheduler.model.queues import CLOSED, OPEN, Queue
from scheduler.model.resources import Resources

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
    )
