"""What make bench checks of every scheduler while it is timed (bench/invariants.py), and how
it reads the API server's audit log (bench/audit.py, bench/metering.py): plain data."""

from __future__ import annotations

import json
from pathlib import Path

from bench import audit
from bench.invariants import Invariants, allocatable_of, requests_of
from bench.metering import last_writes

NODE = {"cpu": 4000, "nvidia.com/gpu": 8, "pods": 110}
ONE_CPU = {"cpu": 1000, "pods": 1}
WHOLE_NODE = {"cpu": 1000, "nvidia.com/gpu": 8, "pods": 1}


def checker(*, gangs: dict[str, list[str]] | None = None, limit: float = 5.0) -> Invariants:
    gangs = gangs if gangs is not None else {"g0": ["a", "b"]}
    return Invariants(
        allocatable={"n0": dict(NODE), "n1": dict(NODE)},
        gangs=gangs,
        minimum={g: len(pods) for g, pods in gangs.items()},
        partial_limit=limit,
    )


def test_a_gang_bound_whole_within_the_bound_breaks_nothing() -> None:
    check = checker()
    check.bound("a", node="n0", requests=ONE_CPU, at=10.0)
    check.bound("b", node="n1", requests=ONE_CPU, at=10.4)
    assert check.check(now=20.0) == []
    assert check.longest_partial_seconds(now=20.0) == 0.4


def test_a_gang_partly_bound_at_the_end_is_named() -> None:
    check = checker()
    check.bound("a", node="n0", requests=ONE_CPU, at=10.0)
    assert check.check(now=12.0) == [
        "gang g0 partly bound at the end: 1 of its minimum 2 bound, since 2.0 s"
    ]


def test_a_gang_whole_only_after_the_bound_is_named_with_how_long() -> None:
    check = checker(limit=5.0)
    check.bound("a", node="n0", requests=ONE_CPU, at=10.0)
    check.bound("b", node="n1", requests=ONE_CPU, at=16.5)
    assert check.check(now=20.0) == [
        "gang g0 partly bound for 6.5 s (more than 5 s) before its minimum 2 was bound"
    ]


def test_a_second_whole_node_pod_on_one_node_is_an_overcommit_named_once() -> None:
    check = checker(gangs={})
    check.bound("x", node="n0", requests=WHOLE_NODE, at=1.0)
    check.bound("y", node="n0", requests=WHOLE_NODE, at=1.1)
    check.bound("z", node="n0", requests=WHOLE_NODE, at=1.2)
    assert check.check(now=2.0) == [
        "node n0 overcommitted by pod y: requests nvidia.com/gpu 16 of 8 allocatable "
        "(cpu in millicores)"
    ]


def test_a_deleted_pod_gives_its_room_back() -> None:
    check = checker(gangs={})
    check.bound("x", node="n0", requests=WHOLE_NODE, at=1.0)
    check.deleted("x")
    check.bound("y", node="n0", requests=WHOLE_NODE, at=2.0)
    assert check.check(now=3.0) == []


def test_a_pod_seen_bound_twice_counts_once_and_an_unknown_node_is_named() -> None:
    check = checker(gangs={})
    check.bound("x", node="n0", requests=WHOLE_NODE, at=1.0)
    check.bound("x", node="n0", requests=WHOLE_NODE, at=1.5)
    check.bound("w", node="ghost", requests=ONE_CPU, at=1.6)
    assert check.check(now=2.0) == ["pod w bound to ghost, a node that does not exist"]


def test_requests_count_as_kube_scheduler_counts_them() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"cpu": "1"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        }
    }
    assert requests_of(pod) == {"cpu": 2000, "nvidia.com/gpu": 2, "memory": 2**30, "pods": 1}
    node = {"status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}
    assert allocatable_of(node) == {"cpu": 64000, "memory": 256 * 2**30, "pods": 110}


def line(agent: str, verb: str, what: str, stamp: str, *, sub: str | None = None) -> str:
    ref = {"resource": what, "namespace": "ns"} | ({"subresource": sub} if sub else {})
    return json.dumps(
        {
            "kind": "Event",
            "stage": "ResponseComplete",
            "verb": verb,
            "userAgent": f"{agent}/v1.0 (linux/amd64)",
            "objectRef": ref,
            "requestReceivedTimestamp": stamp,
            "stageTimestamp": stamp,
        },
        separators=(",", ":"),
    )


def test_the_last_write_is_the_schedulers_and_not_kwoks_nor_a_read() -> None:
    lines = [
        line("kube-scheduler", "create", "pods", "2026-11-27T04:00:01.000001Z", sub="binding"),
        line("kube-scheduler", "patch", "events", "2026-11-27T04:00:02.500000Z"),
        line("kube-scheduler", "list", "pods", "2026-11-27T04:00:09.000000Z"),
        line("kwok", "patch", "pods", "2026-11-27T04:00:08.000000Z", sub="status"),
        line("gang-scheduler-bench", "delete", "pods", "2026-11-27T04:00:09.000000Z"),
    ]
    assert last_writes([x.encode() for x in lines]) == {
        "pods": "2026-11-27T04:00:01.000001Z",
        "events": "2026-11-27T04:00:02.500000Z",
    }
    assert last_writes([]) == {}


def test_requests_are_counted_by_verb_and_resource_in_the_window(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(line("kwok", "patch", "pods", "2026-11-27T04:00:00.000000Z") + "\n")
    reader = audit.AuditLog(log)  # from here on
    with log.open("a") as f:
        for stamp in ("2026-11-27T04:00:01.000000Z", "2026-11-27T04:00:02.000000Z"):
            f.write(line("gang-scheduler", "create", "pods", stamp, sub="binding") + "\n")
        f.write(line("kwok", "patch", "pods", "2026-11-27T04:00:02.000000Z", sub="status") + "\n")
        f.write(line("gang-scheduler", "patch", "podgroups", "2026-11-27T04:00:30.000000Z"))
    # The last line has no newline yet: the API server is still writing it.
    requests = audit.schedulers(reader.read())
    since = audit.parse_stamp("2026-11-27T04:00:00.500000Z")
    until = audit.parse_stamp("2026-11-27T04:00:10.000000Z")
    assert audit.by_verb_and_resource(requests, since=since, until=until) == {
        "total": 2,
        "by_verb_and_resource": {"create pods/binding": 2},
        "agents": ["gang-scheduler"],
    }
    with log.open("a") as f:
        f.write("\nnot json\n")
    (late,) = audit.schedulers(reader.read())
    assert (late.verb, late.what, late.write) == ("patch", "podgroups", True)
