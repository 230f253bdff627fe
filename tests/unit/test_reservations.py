"""The reserve action: the first gang that does not fit gets, at once, the room the latest
forward play started it on, held as it frees, so that later gangs cannot push its start
back; what it does not need stays free for them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.actions import UnknownActions, actions_named
from scheduler.core.forecasting import forecast
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import Result
from scheduler.model.nodes import Taint
from scheduler.model.pods import GangKey
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map

RESERVE = Config(
    default_timeout_seconds=1e9,
    actions=("finish-evictions", "allocate", "reserve", "evict-stale", "preempt", "reclaim"),
)
HOLD_HEAD = replace(RESERVE, actions=("finish-evictions", "allocate", "hold-head"))
BIG = GangKey("default", "big")


def _busy(*, a_ends: str, b_ends: str) -> tuple[list, list]:
    """Two nodes of 4 cpu, each full with a gang of ours running for a known time; big (two
    members of 4 cpu) waits for both."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    a = [
        replace(p, node_name="n0", phase="Running", started=T0)
        for p in gang_pods("a", 2, gang="a", min_available=2, cpu="2",
                           annotations={names.EXPECTED_DURATION: a_ends})
    ]  # fmt: skip
    b = [
        replace(p, node_name="n1", phase="Running", started=T0)
        for p in gang_pods("b", 2, gang="b", min_available=2, cpu="2",
                           annotations={names.EXPECTED_DURATION: b_ends})
    ]  # fmt: skip
    big = gang_pods("big", 2, gang="big", min_available=2, cpu="4", created=T0 - 100)
    return nodes, [*a, *b, *big]


def _late() -> list:
    """A gang of one 2-cpu member that runs for an hour, arriving after big."""
    return gang_pods(
        "late", 1, gang="late", min_available=1, cpu="2", created=T0,
        annotations={names.EXPECTED_DURATION: "1h"},
    )  # fmt: skip


def test_the_first_gang_that_does_not_fit_keeps_the_room_the_play_gave_it() -> None:
    """a's node frees at 5 minutes, b's at 10: big starts at 10 on both. Once a ends, a
    gang that arrives later does not take n0, which big needs."""
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    snap = snapshot(nodes, pods)
    found = forecast(snap, now=T0, config=RESERVE)
    assert found.etas[BIG].p50 == T0 + 600
    first = schedule(replace(snap, forecast=found), now=T0, config=RESERVE)
    assert [e for e in first.events if e.reason == "Reserved"]
    # a ended; late arrives and would fit on n0.
    still = [p for p in pods if not p.ref.name.startswith("a-")]
    later = snapshot(nodes, [*still, *_late()], memory=first.memory)
    result = schedule(replace(later, forecast=found), now=T0 + 300, config=RESERVE)
    assert bind_map(result) == {}, "n0 is big's from the play on"


def test_without_the_reservation_the_late_gang_takes_the_room_and_big_waits_longer() -> None:
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    still = [p for p in pods if not p.ref.name.startswith("a-")]
    result = schedule(snapshot(nodes, [*still, *_late()]), now=T0 + 300, config=HOLD_HEAD)
    assert bind_map(result) == {"late-0": "n0"}


def test_the_nodes_a_reservation_does_not_name_stay_free_for_others() -> None:
    """big (two members of 2 cpu, kept to n0) is reserved on n0; late takes the room n1
    has beside b."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    a = [
        replace(p, node_name="n0", phase="Running", started=T0)
        for p in gang_pods("a", 2, gang="a", min_available=2, cpu="2",
                           annotations={names.EXPECTED_DURATION: "5m"})
    ]  # fmt: skip
    b = [
        replace(p, node_name="n1", phase="Running", started=T0)
        for p in gang_pods("b", 1, gang="b", min_available=1, cpu="2",
                           annotations={names.EXPECTED_DURATION: "10m"})
    ]  # fmt: skip
    big = gang_pods("big", 2, gang="big", min_available=2, cpu="2", created=T0 - 100)
    big = [replace(p, node_selector={"kubernetes.io/hostname": "n0"}) for p in big]
    snap = snapshot(nodes, [*a, *b, *big])
    found = forecast(snap, now=T0, config=RESERVE)
    first = schedule(replace(snap, forecast=found), now=T0, config=RESERVE)
    result = schedule(
        replace(snapshot(nodes, [*a, *b, *big, *_late()], memory=first.memory), forecast=found),
        now=T0 + 1,
        config=RESERVE,
    )
    assert bind_map(result) == {"late-0": "n1"}


def test_without_a_forecast_reserve_does_nothing() -> None:
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    result = schedule(snapshot(nodes, pods), now=T0, config=RESERVE)
    assert not [e for e in result.events if e.reason == "Reserved"]
    assert all(not s.head_target for s in result.memory.values())


def test_reserve_and_hold_head_are_not_named_together() -> None:
    with pytest.raises(UnknownActions, match="reserve and hold-head both hold room"):
        actions_named(("allocate", "hold-head", "reserve"))


def _arrives(lasts: str) -> list:
    """A gang of one 2-cpu member arriving after big, expected to run ``lasts``."""
    return gang_pods(
        "short", 1, gang="short", min_available=1, cpu="2", created=T0,
        annotations={names.EXPECTED_DURATION: lasts},
    )  # fmt: skip


def _after_a_ended(arriving: list) -> dict:
    """The reservation made at T0 (big starts at 10 minutes, when b ends), then a ended at
    5 minutes and ``arriving`` came: what the pass binds."""
    return bind_map(_pass_after_a_ended(arriving))


def _pass_after_a_ended(arriving: list) -> Result:
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    snap = snapshot(nodes, pods)
    found = forecast(snap, now=T0, config=RESERVE)
    first = schedule(replace(snap, forecast=found), now=T0, config=RESERVE)
    still = [p for p in pods if not p.ref.name.startswith("a-")]
    later = snapshot(nodes, [*still, *arriving], memory=first.memory)
    return schedule(replace(later, forecast=found), now=T0 + 300, config=RESERVE)


def test_a_gang_that_ends_before_the_reservation_starts_backfills_onto_its_room() -> None:
    """3 minutes from minute 5 end at 8: before big's start at 10, with a minute to spare."""
    assert _after_a_ended(_arrives("3m")) == {"short-0": "n0"}


def test_a_backfilled_gang_says_whose_room_it_runs_on_and_until_when() -> None:
    result = _pass_after_a_ended(_arrives("3m"))
    [said] = {e.message for e in result.events if e.reason == "Backfilled"}
    assert said.startswith("gang default/short runs on nodes reserved for default/big from ")
    assert "expected to end by" in said


def test_a_gang_that_would_still_run_when_it_starts_does_not() -> None:
    assert _after_a_ended(_arrives("4m30s")) == {}, "ends at 9m30s: within the margin"
    assert _after_a_ended(_late()) == {}


def test_a_gang_of_unknown_length_does_not_backfill() -> None:
    unknown = gang_pods("short", 1, gang="short", min_available=1, cpu="2", created=T0)
    assert _after_a_ended(unknown) == {}


def test_the_room_is_held_again_after_a_backfill() -> None:
    """Two short gangs arrive; each takes 2 cpu of n0's 4 when admitted: the reservation's
    holds come back after each turn, so a third, long one still finds nothing."""
    two = [
        *gang_pods("s1", 1, gang="s1", min_available=1, cpu="2", created=T0,
                   annotations={names.EXPECTED_DURATION: "2m"}),
        *gang_pods("s2", 1, gang="s2", min_available=1, cpu="2", created=T0 + 1,
                   annotations={names.EXPECTED_DURATION: "2m"}),
    ]  # fmt: skip
    placed = _after_a_ended([*two, *_late()])
    assert placed == {"s1-0": "n0", "s2-0": "n0"}


def test_a_reservation_whose_gang_is_gone_holds_nothing() -> None:
    """big reserved n0 and n1, then was deleted (its memory still there, as until the
    cache forgets it): once a has ended, late takes n0."""
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    snap = snapshot(nodes, pods)
    found = forecast(snap, now=T0, config=RESERVE)
    first = schedule(replace(snap, forecast=found), now=T0, config=RESERVE)
    assert first.memory[BIG].head_target
    left = [p for p in pods if p.ref.name.startswith("b-")]
    later = replace(snapshot(nodes, [*left, *_late()], memory=first.memory), forecast=found)
    assert bind_map(schedule(later, now=T0 + 300, config=RESERVE)) == {"late-0": "n0"}


def test_a_bound_gang_keeps_no_reservation() -> None:
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    snap = snapshot(nodes, pods)
    found = forecast(snap, now=T0, config=RESERVE)
    first = schedule(replace(snap, forecast=found), now=T0, config=RESERVE)
    big_only = [p for p in pods if p.ref.name.startswith("big")]
    freed = schedule(
        replace(snapshot(nodes, big_only, memory=first.memory), forecast=found),
        now=T0 + 600,
        config=RESERVE,
    )
    assert sorted(bind_map(freed)) == ["big-0", "big-1"]
    assert not freed.memory[BIG].head_target


def _full(ends: list[int]) -> list:
    """Node ``n<i>`` full with a run of 4 cpu ending after ``ends[i]`` minutes."""
    return [
        replace(p, node_name=f"n{i}", phase="Running", started=T0)
        for i, minutes in enumerate(ends)
        for p in gang_pods(f"r{i}", 1, gang=f"r{i}", min_available=1, cpu="4",
                           annotations={names.EXPECTED_DURATION: f"{minutes}m"})
    ]  # fmt: skip


def _arriving(arrivals: list[tuple[str, int]]) -> list:
    """Gangs of one pod (cpu, minutes it runs), arriving after the waiting ones."""
    return [
        p
        for j, (cpu, minutes) in enumerate(arrivals)
        for p in gang_pods(f"x{j}", 1, gang=f"x{j}", min_available=1, cpu=cpu, created=T0 + j,
                           annotations={names.EXPECTED_DURATION: f"{minutes}m"})
    ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    ends=st.lists(st.integers(1, 10), min_size=3, max_size=3),
    arrivals=st.lists(st.tuples(st.sampled_from(["1", "2", "4"]), st.integers(1, 20)), max_size=5),
)
def test_no_backfilled_gang_delays_the_reservation_in_the_play(
    ends: list[int], arrivals: list[tuple[str, int]]
) -> None:
    """Three nodes of 4 cpu, each full with a run ending at a whole number of minutes; big
    needs two of them. The forecast before any arrival says when big starts (S). Gangs that
    arrive then (younger, as big's priority) backfill only where they end before S: played
    forward with that reservation, big starts at S all the same."""
    nodes = [node(f"n{i}", cpu="4") for i in range(3)]
    running = _full(ends)
    big = gang_pods("big", 2, gang="big", min_available=2, cpu="4", created=T0 - 100)
    before = forecast(snapshot(nodes, [*running, *big]), now=T0, config=RESERVE)
    start = before.etas[BIG].p50
    assert start is not None
    came = _arriving(arrivals)
    after = forecast(
        replace(snapshot(nodes, [*running, *big, *came]), forecast=before),
        now=T0,
        config=RESERVE,
    )
    assert after.etas[BIG].p50 == start


def test_a_reserved_gang_is_in_every_snapshot_even_parked() -> None:
    """Its holds are taken at its own turn: a cache that left it out as parked would let
    the reserved room go to anyone (e2e: a long job bound on it)."""
    from scheduler.cache.cluster import ClusterCache  # noqa: PLC0415
    from scheduler.model.snapshot import GangState, Parked  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.upsert_node(node("n0", cpu="4"))
    big = gang_pods("big", 2, gang="big", min_available=2, cpu="4")
    for pod in big:
        cache.upsert_pod(pod)
    cache.snapshot(now=T0)  # what was new is taken
    parked = Parked(generation=0, since=T0, due_at=T0 + 3600)
    target = {p.ref: "n0" for p in big}
    cache.remember({BIG: GangState(first_attempt=T0, parked=parked, head_target=target)})
    assert {p.ref.name for p in cache.snapshot(now=T0 + 1).pods} == {"big-0", "big-1"}


def _two_waiting() -> tuple[list, list]:
    """Four nodes of 4 cpu, each full with a run of ours: pool a (n0, n1) frees at 20
    minutes, pool b's n2 at 5 and n3 at 10. big (older) needs both nodes of pool a and
    starts there at 20; second needs both of pool b and starts there at 10."""
    pools = {"n0": "a", "n1": "a", "n2": "b", "n3": "b"}
    nodes = [node(name, cpu="4", labels={"pool": pool}) for name, pool in pools.items()]
    ends = {"n0": "20m", "n1": "20m", "n2": "5m", "n3": "10m"}
    running = [
        replace(p, node_name=name, phase="Running", started=T0)
        for name, minutes in ends.items()
        for p in gang_pods(f"r-{name}", 1, gang=f"r-{name}", min_available=1, cpu="4",
                           annotations={names.EXPECTED_DURATION: minutes})
    ]  # fmt: skip
    big = gang_pods("big", 2, gang="big", min_available=2, cpu="4", created=T0 - 100,
                    spec={"nodeSelector": {"pool": "a"}})  # fmt: skip
    second = gang_pods("second", 2, gang="second", min_available=2, cpu="4", created=T0 - 50,
                       spec={"nodeSelector": {"pool": "b"}})  # fmt: skip
    return nodes, [*running, *big, *second]


SECOND = GangKey("default", "second")


@pytest.mark.parametrize(("count", "late_binds"), [(1, True), (2, False)])
def test_a_second_reservation_keeps_the_second_gangs_room_too(count: int, late_binds: bool) -> None:
    """With one reservation, a gang arriving once n2 frees takes it, and second, which the
    play started on n2 and n3 at 10 minutes, waits for big to end; with two, it does not."""
    config = replace(RESERVE, reservations=count)
    nodes, pods = _two_waiting()
    snap = snapshot(nodes, pods)
    found = forecast(snap, now=T0, config=config)
    assert (found.etas[BIG].p50, found.etas[SECOND].p50) == (T0 + 1200, T0 + 600)
    first = schedule(replace(snap, forecast=found), now=T0, config=config)
    reserved = {e.regarding.name for e in first.events if e.reason == "Reserved"}
    assert reserved == ({"big-0", "big-1", "second-0", "second-1"} if count == 2 else
                        {"big-0", "big-1"})  # fmt: skip
    still = [p for p in pods if p.ref.name != "r-n2-0"]
    later = snapshot(nodes, [*still, *_late()], memory=first.memory)
    result = schedule(replace(later, forecast=found), now=T0 + 300, config=config)
    assert (bind_map(result) == {"late-0": "n2"}) is late_binds


def test_reservations_are_a_whole_number_of_one_or_more() -> None:
    from scheduler.cli import build_parser  # noqa: PLC0415

    parser = build_parser()
    args = parser.parse_args(["run", "--actions", "allocate,reserve", "--reservations", "3"])
    assert args.reservations == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--reservations", "0"])


@settings(max_examples=40, deadline=None)
@given(
    ends=st.lists(st.integers(1, 10), min_size=4, max_size=4),
    arrivals=st.lists(st.tuples(st.sampled_from(["1", "2", "4"]), st.integers(1, 20)), max_size=5),
)
def test_no_backfilled_gang_delays_either_of_two_reservations_in_the_play(
    ends: list[int], arrivals: list[tuple[str, int]]
) -> None:
    """As for one reservation, with two gangs waiting: big needs both nodes of pool a,
    second both of pool b, each node full with a run. Played forward with two reservations,
    gangs that arrive backfill only where they end before the earlier reservation starts,
    and neither start moves (with one, an arrival may take pool b while big waits)."""
    config = replace(RESERVE, reservations=2)
    nodes = [node(f"n{i}", cpu="4", labels={"pool": "ab"[i // 2]}) for i in range(4)]
    running = _full(ends)
    waiting = [
        *gang_pods("big", 2, gang="big", min_available=2, cpu="4", created=T0 - 100,
                   annotations={names.EXPECTED_DURATION: "30m"},
                   spec={"nodeSelector": {"pool": "a"}}),
        *gang_pods("second", 2, gang="second", min_available=2, cpu="4", created=T0 - 50,
                   annotations={names.EXPECTED_DURATION: "30m"},
                   spec={"nodeSelector": {"pool": "b"}}),
    ]  # fmt: skip
    before = forecast(snapshot(nodes, [*running, *waiting]), now=T0, config=config)
    starts = (before.etas[BIG].p50, before.etas[SECOND].p50)
    assert None not in starts
    came = _arriving(arrivals)
    after = forecast(
        replace(snapshot(nodes, [*running, *waiting, *came]), forecast=before),
        now=T0,
        config=config,
    )
    assert (after.etas[BIG].p50, after.etas[SECOND].p50) == starts


def test_a_reservation_on_a_node_tainted_since_holds_nothing_there() -> None:
    """Room held where the gang can no longer go would only keep others off it: with its
    kept node and the play's both out of its reach, it is not reserved (a later play
    places it elsewhere)."""
    nodes, pods = _busy(a_ends="5m", b_ends="10m")
    snap = snapshot(nodes, pods)
    found = forecast(snap, now=T0, config=RESERVE)
    first = schedule(replace(snap, forecast=found), now=T0, config=RESERVE)
    assert set(first.memory[BIG].head_target.values()) == {"n0", "n1"}
    tainted = [replace(n, taints=(Taint("maintenance"),)) if n.name == "n0" else n for n in nodes]
    still = [p for p in pods if not p.ref.name.startswith("a-")]
    later = snapshot(tainted, [*still, *_late()], memory=first.memory)
    result = schedule(replace(later, forecast=found), now=T0 + 300, config=RESERVE)
    assert not [e for e in result.events if e.reason == "Reserved"]
    assert not result.memory[BIG].head_target
