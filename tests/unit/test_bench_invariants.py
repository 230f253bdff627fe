"""What make bench checks of every scheduler while it is timed (bench/invariants.py), and how
it reads the API server's audit log (bench/audit.py, bench/metering.py): plain data."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import audit
from bench.invariants import Invariants, allocatable_of, requests_of
from bench.metering import Meter

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


def test_only_the_scheduler_under_tests_requests_are_read_and_a_line_in_writing_waits(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    log.write_text(line("kube-scheduler", "patch", "events", "2026-11-27T04:00:00.000000Z") + "\n")
    reader = audit.AuditLog(log)  # from here on
    with log.open("a") as f:
        for stamp in ("2026-11-27T04:00:01.000000Z", "2026-11-27T04:00:02.000000Z"):
            f.write(line("kube-scheduler", "create", "pods", stamp, sub="binding") + "\n")
        f.write(line("kwok", "patch", "pods", "2026-11-27T04:00:02.000000Z", sub="status") + "\n")
        f.write(line("gang-scheduler-bench", "delete", "pods", "2026-11-27T04:00:03Z") + "\n")
        f.write(line("kube-scheduler", "list", "pods", "2026-11-27T04:00:03.000000Z") + "\n")
        f.write(line("kube-scheduler", "patch", "podgroups", "2026-11-27T04:00:30.000000Z"))
    # The last line has no newline yet: the API server is still writing it.
    requests = reader.read()
    assert [(r.agent, r.verb, r.what, r.write) for r in requests] == [
        ("kube-scheduler", "create", "pods/binding", True),
        ("kube-scheduler", "create", "pods/binding", True),
        ("kube-scheduler", "list", "pods", False),
    ]
    since = audit.parse_stamp("2026-11-27T04:00:01.500000Z")
    until = audit.parse_stamp("2026-11-27T04:00:10.000000Z")
    assert audit.by_verb_and_resource(requests, since=since, until=until) == {
        "total": 2,
        "by_verb_and_resource": {"create pods/binding": 1, "list pods": 1},
        "agents": ["kube-scheduler"],
    }
    with log.open("a") as f:
        f.write("\nnot an audit event\n")
    (late,) = reader.read()
    assert (late.verb, late.what, late.write) == ("patch", "podgroups", True)


def stamp(seconds_from_now: float) -> str:
    moment = datetime.fromtimestamp(time.time() + seconds_from_now, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def meter_over(tmp_path: Path, *lines: str) -> Meter:
    """A meter whose scheduler started 10 s ago (its process is not sampled: the meter is
    not started), over an audit log that then gains ``lines``."""
    log = tmp_path / "audit.log"
    log.write_text("")
    process = subprocess.Popen(["true"])
    process.wait()
    meter = Meter(process, log, started=time.monotonic() - 10)
    log.write_text("".join(f"{x}\n" for x in lines))
    return meter


def test_quiescence_is_the_last_write_after_the_last_bind_once_quiet(tmp_path: Path) -> None:
    meter = meter_over(
        tmp_path,
        line("kube-scheduler", "create", "pods", stamp(-0.8), sub="binding"),
        line("kube-scheduler", "create", "events", stamp(-0.5)),
        line("kube-scheduler", "get", "pods", stamp(-0.1)),  # not a write
    )
    quiet = asyncio.run(meter.quiescence(watched_last_bind=0.0, quiet=0.3, cap=5))
    assert quiet.last_write is not None
    assert quiet.last_write - quiet.last_bind == pytest.approx(0.3, abs=0.01)
    assert quiet.until == quiet.last_write
    assert meter.last(what="events") == pytest.approx(quiet.last_write)
    counted = meter.counted(until=quiet.until)
    assert counted["by_verb_and_resource"] == {"create events": 1, "create pods/binding": 1}


def test_a_scheduler_still_writing_past_the_cap_is_not_quiet(tmp_path: Path) -> None:
    meter = meter_over(
        tmp_path,
        line("kube-scheduler", "create", "pods", stamp(-3), sub="binding"),
        line("kube-scheduler", "create", "events", stamp(-0.2)),
    )
    quiet = asyncio.run(meter.quiescence(watched_last_bind=0.0, quiet=0.5, cap=2))
    assert quiet.last_write is None
    assert quiet.until == pytest.approx(quiet.last_bind + 2)


def test_a_scheduler_whose_last_write_came_before_the_cap_is_quiet_after_it(
    tmp_path: Path,
) -> None:
    """Quiet is decided after the cap if the last write came just before it: not reported
    as still writing."""
    meter = meter_over(
        tmp_path,
        line("kube-scheduler", "create", "pods", stamp(-1.0), sub="binding"),
        line("kube-scheduler", "create", "events", stamp(-0.15)),
    )
    quiet = asyncio.run(meter.quiescence(watched_last_bind=0.0, quiet=0.4, cap=0.9))
    assert quiet.last_write is not None
    assert quiet.last_write - quiet.last_bind == pytest.approx(0.85, abs=0.01)
