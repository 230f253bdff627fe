"""A gang cut short by our own interrupted bind gets its room back first; a gang that
another binder started (a member bound without our bound-by mark) had no room decided for
it, and goes in its turn."""

from __future__ import annotations

from scheduler.core.scheduling import schedule
from scheduler.model import names
from tests.unit.builders import T0, node, pod, snapshot
from tests.unit.test_allocation import bind_map

OURS = {names.BOUND_BY: "gang-scheduler"}


def _gang(
    name: str,
    size: int,
    *,
    bound_on: str,
    mark: dict[str, str] | None,
    priority: int | None = None,
    cpu: str = "1",
) -> list:
    """A Strict gang of ``size`` whose first member is bound on ``bound_on``, carrying
    ``mark``; the rest pending."""
    first = pod(
        f"{name}-0",
        gang=name,
        min_available=size,
        cpu=cpu,
        priority=priority,
        node_name=bound_on,
        phase="Running",
        annotations=mark,
    )
    rest = [
        pod(f"{name}-{i}", gang=name, min_available=size, cpu=cpu, priority=priority)
        for i in range(1, size)
    ]
    return [first, *rest]


def test_a_gang_we_cut_short_completes_before_a_higher_priority_gang_another_binder_began() -> None:
    """Chaos seed 10102: the leader was killed after the first bind of each gang of its
    pass, and a rival then bound one member of a gang of priority 1000 on a node of its
    own. The new leader took the rival's gang first (by priority, as a gang cut short
    too) and its members took the room the killed leader had decided for ours, leaving
    ours partly bound for good."""
    nodes = [node("n0", cpu="5"), node("rival", cpu="1")]
    ours = _gang("g1", 4, bound_on="n0", mark=OURS)
    theirs = _gang("hi0", 4, bound_on="rival", mark=None, priority=1000)
    result = schedule(snapshot(nodes, [*ours, *theirs]), now=T0)
    placed = bind_map(result)
    assert {name for name in placed if name.startswith("g1-")} == {"g1-1", "g1-2", "g1-3"}
    # The rival's gang runs one member of its minimum 4: the three it lacks go together or
    # not at all, and room for one is left.
    assert {name for name in placed if name.startswith("hi0-")} == set()


def test_a_gang_another_binder_began_waits_behind_older_gangs_of_its_priority() -> None:
    nodes = [node("n0", cpu="2"), node("elsewhere", cpu="1")]
    older = [pod(f"old-{i}", gang="old", min_available=2, created=T0 - 500) for i in (0, 1)]
    theirs = _gang("young", 3, bound_on="elsewhere", mark=None)
    result = schedule(snapshot(nodes, [*older, *theirs]), now=T0)
    assert sorted(bind_map(result)) == ["old-0", "old-1"]


def test_a_gang_we_began_is_first_whatever_its_priority() -> None:
    nodes = [node("n0", cpu="2"), node("n1", cpu="1")]
    high = [
        pod(f"high-{i}", gang="high", min_available=2, priority=1000, created=T0 - 500)
        for i in (0, 1)
    ]
    ours = _gang("low", 3, bound_on="n1", mark=OURS)
    result = schedule(snapshot(nodes, [*high, *ours]), now=T0)
    assert sorted(bind_map(result)) == ["low-1", "low-2"]


def test_the_bound_by_mark_is_read_from_the_pod() -> None:
    marked = pod("p", node_name="n0", phase="Running", annotations=OURS)
    assert marked.bound_by == "gang-scheduler"
    assert pod("q", node_name="n0", phase="Running").bound_by == ""
