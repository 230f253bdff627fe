"""A parked gang that a change could help is tried at once, whatever its backoff: room freed
goes to the gang first in the queue, not to one behind it that was sooner off its backoff
(kube-scheduler's backoff inverts the queue that way for identical pods). The backoff still
paces what is tried again without such a change."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.builders import T0, gang_pods, node, pod
from tests.unit.test_allocation import bind_map
from tests.unit.test_queue import Loop


def test_room_freed_goes_to_the_first_gang_in_the_queue_though_it_is_backing_off() -> None:
    """a failed at T0 and backs off until T0 + 1; b, identical and posted later, comes at
    T0 + 0.5, as busy ends: a binds, b waits."""
    busy = pod("busy", scheduler="x", node_name="n0", phase="Running", cpu="4")
    loop = Loop(busy, *gang_pods("a", 1, gang="a", min_available=1, cpu="4", created=T0 - 10),
                nodes=[node("n0", cpu="4")])  # fmt: skip
    assert not bind_map(loop.run(T0))
    loop.cache.upsert_pod(replace(busy, phase="Succeeded"))
    for member in gang_pods("b", 1, gang="b", min_available=1, cpu="4", created=T0):
        loop.cache.upsert_pod(member)
    assert bind_map(loop.run(T0 + 0.5)) == {"a-0": "n0"}


def test_a_gang_woken_by_a_change_is_tried_once_for_it() -> None:
    """A change that lets one member of g fit, not both: g is tried at once for it, fails,
    and is not tried again until the next change, backoff over or not."""
    busy = pod("busy", scheduler="x", node_name="n0", phase="Running", cpu="4")
    loop = Loop(busy, *gang_pods("g", 2, gang="g", min_available=2, cpu="3"),
                nodes=[node("n0", cpu="4"), node("n1", cpu="2")])  # fmt: skip
    assert loop.run(T0).attempts
    loop.cache.upsert_pod(replace(busy, phase="Succeeded"))
    assert loop.run(T0 + 0.5).attempts  # woken by n0's room, within its backoff
    assert not loop.run(T0 + 0.6).attempts
    assert not loop.run(T0 + 30).attempts  # its backoff over: nothing changed
