"""Queues shared by teams (#22), first step: Volcano's Queue read field by field, and the
tree of queues checked, each problem named with what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scheduler.codecs.queues import queue_from_dict
from scheduler.core.queues import tree_errors
from scheduler.model import holdings
from scheduler.model.queues import CLOSED, OPEN, Queue

EXAMPLE = Path(__file__).parent / "owners" / "volcano-queue-default.yaml"


def queue(name: str, **spec: Any) -> Queue:
    state = spec.pop("state", None)
    body: dict[str, Any] = {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}
    if state is not None:
        body["status"] = {"state": state}
    return queue_from_dict(body)


def test_volcanos_own_example_queue_reads_as_it_says() -> None:
    """volcano.sh/apis v1.14.0's artifacts/queue.yaml."""
    read = queue_from_dict(yaml.safe_load(EXAMPLE.read_text()))
    assert (read.name, read.weight, read.reclaimable, read.state) == ("default", 1, True, OPEN)
    assert read.capability == {"cpu": 2000, "memory": 4 * 10**9}
    assert read.errors == ()


def test_every_field_is_read_and_defaults_are_volcanos() -> None:
    read = queue(
        "team-a",
        parent="research",
        weight=3,
        deserved={"nvidia.com/gpu": "8"},
        guarantee={"resource": {"nvidia.com/gpu": "2"}},
        reclaimable=False,
        priority=10,
        state="Closed",
    )
    assert read.parent == "research"
    assert (read.weight, read.priority, read.reclaimable, read.state) == (3, 10, False, CLOSED)
    assert read.deserved == {"nvidia.com/gpu": 8}
    assert read.guarantee == {"nvidia.com/gpu": 2}
    assert read.capability is None  # no ceiling
    assert not read.open
    plain = queue("plain")
    assert (plain.weight, plain.reclaimable, plain.state) == (1, True, OPEN)


def test_hostile_values_are_errors_that_name_the_field_never_exceptions() -> None:
    read = queue(
        "bad",
        weight=0,
        capability={"cpu": "-5", "memory": "1e999"},
        reclaimable="yes",
        state="Paused",
    )
    assert read.errors == (
        "spec.weight must be a whole number from 1 to 2147483647, got 0",
        "spec.reclaimable must be true or false, got 'yes'",
        "status.state must be Open, Closed, Closing or Unknown, got 'Paused'",
        "spec.capability.cpu must be a quantity such as 500m, 2 or 8Gi, from 0 up to 2^63-1 "
        "base units (cpu: millicores), got '-5'",
        "spec.capability.memory must be a quantity such as 500m, 2 or 8Gi, from 0 up to "
        "2^63-1 base units (cpu: millicores), got '1e999'",
    )
    for junk in (None, 5, "x", [], {"spec": "x"}, {"spec": {"weight": True}}):
        assert isinstance(queue_from_dict(junk), Queue)


def test_a_tree_with_no_problem_has_no_errors() -> None:
    queues = {
        "research": queue("research", capability={"nvidia.com/gpu": "16"}),
        "team-a": queue("team-a", parent="research", capability={"nvidia.com/gpu": "8"}),
        "default": queue("default"),
    }
    assert tree_errors(queues) == {}


def test_an_unknown_parent_a_cycle_and_a_child_above_its_parent_are_named() -> None:
    queues = {
        "orphan": queue("orphan", parent="nowhere"),
        "a": queue("a", parent="b"),
        "b": queue("b", parent="a"),
        "parent": queue("parent", capability={"nvidia.com/gpu": "4"}),
        "greedy": queue("greedy", parent="parent", capability={"nvidia.com/gpu": "8"}),
        "overdeserving": queue("overdeserving", capability={"cpu": "2"}, deserved={"cpu": "4"}),
    }
    errors = tree_errors(queues)
    assert errors["orphan"] == (
        "spec.parent names queue 'nowhere', which does not exist: create it, or leave parent "
        "out (a child of the root)",
    )
    assert errors["a"] == ("spec.parent makes a cycle (a -> b -> a): a queue tree has no cycles",)
    assert "b" in errors
    assert errors["greedy"] == (
        "spec.capability asks more nvidia.com/gpu than its parent 'parent' has in its "
        "spec.capability: a child's limits live inside its parent's",
    )
    assert errors["overdeserving"] == ("spec.deserved asks more cpu than its own spec.capability",)
    assert "parent" not in errors


# -- the Queue's status, and the cache's view of queues ------------------------------------------


def test_a_queue_status_is_read_and_patched_back_with_resources_no_longer_held_removed() -> None:
    from scheduler.codecs.queues import queue_status_from_dict, queue_status_patch  # noqa: PLC0415
    from scheduler.model.queues import QueueStatus  # noqa: PLC0415
    from scheduler.model.resources import Resources  # noqa: PLC0415

    before = queue_status_from_dict(
        {
            "status": {
                "state": "Open",
                "allocated": {"cpu": "4", "nvidia.com/gpu": "8"},
                "pending": 2,
            }
        }
    )
    assert before == QueueStatus(
        state="Open", allocated=Resources({"cpu": 4000, "nvidia.com/gpu": 8}), pending=2
    )
    after = QueueStatus(state="Open", allocated=Resources({"cpu": 1500}), running=1)
    assert queue_status_patch(after, before=before) == {
        "status": {
            "state": "Open",
            "pending": 0,
            "running": 1,
            "allocated": {"nvidia.com/gpu": None, "cpu": "1500m"},
        }
    }
    # Hostile status values read as nothing rather than raise.
    odd = queue_status_from_dict({"status": {"allocated": {"cpu": "lots"}, "pending": -3}})
    assert odd == QueueStatus()


def test_queue_statuses_count_gangs_and_what_each_subtree_holds() -> None:
    from scheduler.core.queues import queue_statuses  # noqa: PLC0415
    from scheduler.model.queues import QueueCensus, QueueStatus  # noqa: PLC0415
    from scheduler.model.resources import Resources  # noqa: PLC0415

    queues = {q.name: q for q in (queue("org"), queue("a", parent="org"), queue("gone"))}
    census = QueueCensus(
        held={"a": Resources({"cpu": 2000}), "org": Resources({"cpu": 1000})},
        running={"a": 2},
        pending={"a": 1, "gone": 1},
    )
    observed = {"gone": QueueStatus(state="Closing")}
    statuses = queue_statuses(queues, census=census, observed=observed)
    assert statuses["org"] == QueueStatus(state="Open", allocated=Resources({"cpu": 3000}))
    assert statuses["a"] == QueueStatus(
        state="Open", allocated=Resources({"cpu": 2000}), pending=1, running=2
    )
    assert statuses["gone"].state == "Closing"  # a gang still waits in it
    statuses = queue_statuses(
        queues, census=QueueCensus(held={}, running={}, pending={}), observed=observed
    )
    assert statuses["gone"].state == "Closed"  # nothing of it left: Closing becomes Closed


def test_the_cache_has_no_queues_until_the_api_server_serves_them() -> None:
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415
    from tests.unit.builders import SCHEDULER, node, pod  # noqa: PLC0415

    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_queue(queue("team-a"))
    assert cache.snapshot().queues is None
    cache.serve(QUEUES, True)
    assert cache.dirty
    snap = cache.snapshot()
    assert snap.queues is not None
    assert set(snap.queues) == {"team-a"}
    cache.upsert_node(node("n0", gpu=4))
    cache.upsert_pod(pod("a", gpu=1, labels={"gang-scheduler.io/queue": "team-a"}))
    cache.upsert_pod(pod("b", gpu=2, node_name="n0", labels={"gang-scheduler.io/queue": "team-a"}))
    snap = cache.snapshot()
    assert snap.queue_waiting is not None
    assert snap.queue_waiting["team-a"]["nvidia.com/gpu"] == 1
    census = holdings.census(*cache.census_inputs())
    assert census.held["team-a"]["nvidia.com/gpu"] == 2
    assert census.running == {"team-a": 1}
    assert census.pending == {"team-a": 1}
    cache.remove_queue("team-a")
    snap = cache.snapshot()
    assert snap.queues == {}
