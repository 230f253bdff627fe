"""Stale gangs (#23, KAI's stale-gang eviction): a running gang with fewer running members
than its minimum for longer than a grace period has the rest evicted, so that its room goes
to gangs that can run. Off unless --stale-gang-after or gang-scheduler.io/stale-after says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.codecs.gangs import read_options
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import GangState, Staleness
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map, events

STALE_60 = Config(stale_gang_seconds=60.0)
KEY = GangKey("default", "g")


def gang(count: int, *, running: int, succeeded: int = 0, **kw: Any) -> list[Any]:
    """A Koordinator gang needing 3, ``count`` members left: the first ``running`` run, the
    next ``succeeded`` finished, the rest pending."""
    pods = gang_pods("g", count, gang="g", min_available=3, created=T0, **kw)
    phases = ["Running"] * running + ["Succeeded"] * succeeded
    return [
        replace(p, node_name=f"n{i}", phase=phases[i]) if i < len(phases) else p
        for i, p in enumerate(pods)
    ]


NODES = [node(f"n{i}") for i in range(4)]


def passes(pods: list[Any], *, config: Config, times: list[float]) -> list[Any]:
    """Passes at ``times``, each fed the memory of the one before."""
    results, memory = [], {}
    for now in times:
        result = schedule(snapshot(NODES, pods, memory=memory), now=now, config=config)
        memory = dict(result.memory)
        results.append(result)
    return results


def evicted(result: Any) -> list[str]:
    return sorted(e.pod.name for e in result.evictions)


def test_a_gang_below_its_minimum_past_the_grace_has_its_running_members_evicted() -> None:
    """2 of its 3 run (the third is gone): nothing at first, a pass is asked for when the
    grace ends, and then both are evicted, marked stale, and the gang is told why."""
    first, early, due = passes(gang(2, running=2), config=STALE_60, times=[T0, T0 + 30, T0 + 60])
    assert first.evictions == early.evictions == ()
    assert first.wake_at == T0 + 60
    assert first.memory[KEY].stale.since == T0
    assert first.memory[KEY].stale.due == T0 + 60
    assert evicted(due) == ["g-0", "g-1"]
    assert all(e.stale for e in due.evictions)
    (message,) = set(events(due, "StaleGang"))
    assert "has run with 2 of its minimum 3 members for 60s (stale after 60s)" in message


def test_members_that_finished_count_so_a_job_near_its_end_is_not_stale() -> None:
    (result,) = passes(gang(3, running=2, succeeded=1), config=STALE_60, times=[T0 + 600])
    assert result.evictions == ()
    assert result.memory[KEY].stale is None


def test_a_gang_whose_lost_member_is_back_is_no_longer_stale() -> None:
    """The replacement binds before the grace ends: the clock stops, nothing is evicted."""
    (stale,) = passes(gang(2, running=2), config=STALE_60, times=[T0])
    whole = gang(3, running=3)
    later = schedule(snapshot(NODES, whole, memory=stale.memory), now=T0 + 90, config=STALE_60)
    assert later.evictions == ()
    assert later.memory[KEY].stale is None


def test_a_gang_that_waits_for_its_replacement_is_still_stale() -> None:
    """Its third member was made again but finds no room: the two that run still hold
    their room without working as a gang, and go when the grace ends."""
    pods = gang(3, running=2, cpu="8")  # the pending one needs a whole node; none is free
    full = [node("n0", cpu="8"), node("n1", cpu="8")]
    first = schedule(snapshot(full, pods), now=T0, config=STALE_60)
    due = schedule(snapshot(full, pods, memory=first.memory), now=T0 + 60, config=STALE_60)
    assert evicted(due) == ["g-0", "g-1"]


def test_off_by_default_and_the_gang_may_say_otherwise() -> None:
    (off,) = passes(gang(2, running=2), config=Config(), times=[T0 + 3600])
    assert off.evictions == ()
    assert off.memory[KEY].stale is None
    asks = {names.STALE_AFTER: "30s"}
    _, due = passes(gang(2, running=2, annotations=asks), config=Config(), times=[T0, T0 + 30])
    assert evicted(due) == ["g-0", "g-1"]
    never = {names.STALE_AFTER: "never"}
    (kept,) = passes(gang(2, running=2, annotations=never), config=STALE_60, times=[T0 + 3600])
    assert kept.evictions == ()


def test_a_malformed_stale_after_names_the_annotation_and_what_it_may_say() -> None:
    read = read_options({names.STALE_AFTER: "soon"}, namespace="default")
    assert read.errors == (
        f"annotation {names.STALE_AFTER} must be a duration such as 600s, 10m or 1h, at most "
        "2562047h, or never, got 'soon'",
    )
    assert read_options({names.STALE_AFTER: "Never"}, namespace="default").stale_seconds == float(
        "inf"
    )


def test_a_pass_that_leaves_the_stale_gang_out_still_asks_to_run_when_its_grace_ends() -> None:
    """Passes between (for other gangs) do not see the stale gang; each still asks for a
    pass at its due time, or the loop would forget it."""
    (stale,) = passes(gang(2, running=2), config=STALE_60, times=[T0])
    other = gang_pods("other", 1, created=T0)
    between = schedule(snapshot(NODES, other, memory=stale.memory), now=T0 + 10, config=STALE_60)
    assert between.wake_at == T0 + 60


def test_explain_says_when_a_stale_gangs_members_are_evicted() -> None:
    from scheduler.core.explaining import explain  # noqa: PLC0415

    (stale,) = passes(gang(2, running=2), config=STALE_60, times=[T0])
    snap = snapshot(NODES, gang(2, running=2), memory=stale.memory)
    lines = explain(snap, KEY, now=T0 + 20, config=STALE_60)
    assert any(
        "stale: it has run below its minimum for 20s; its running members are evicted in 40s"
        in line
        for line in lines
    ), lines


def test_a_stale_member_is_marked_stale_gang_then_deleted_and_a_gone_one_is_left_be() -> None:
    """The shell's part: DisruptionTarget with reason StaleGang (not a preemption), then a
    delete of that very pod (uid precondition); a pod already gone (404) is no error."""
    import asyncio  # noqa: PLC0415

    from aiohttp import web  # noqa: PLC0415

    from scheduler.model.decisions import Eviction  # noqa: PLC0415
    from scheduler.model.pods import PodRef  # noqa: PLC0415
    from scheduler.shell.patching import Patcher  # noqa: PLC0415
    from tests.unit.servers import server  # noqa: PLC0415

    seen: list[tuple[str, str, dict]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else {}
        seen.append((request.method, request.path, body))
        status = 404 if "/gone" in request.path else 200
        return web.json_response({"reason": "x"} if status >= 400 else {}, status=status)

    async def run() -> None:
        async with server(handler) as api:
            patcher = Patcher(api, retries=0)
            for name in ("g-0", "gone"):
                ref = PodRef("default", name, f"uid-{name}")
                await patcher.evict([Eviction(ref, "n0", "stale", stale=True)])

    asyncio.run(run())
    (mark, delete, gone) = seen
    assert mark[0] == "PATCH"
    assert mark[1] == "/api/v1/namespaces/default/pods/g-0/status"
    (condition,) = mark[2]["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "StaleGang")
    assert delete[:2] == ("DELETE", "/api/v1/namespaces/default/pods/g-0")
    assert delete[2]["preconditions"] == {"uid": "uid-g-0"}
    assert gone[1] == "/api/v1/namespaces/default/pods/gone/status"  # 404: nothing more


# -- from the review of #23 -------------------------------------------------------------------


def stale_gang(*, third: str = "pending") -> list[Any]:
    """A Koordinator gang needing 3: g-0, g-1 run on n0, n1; g-2 (its replacement) is
    pending, or absent (``third`` "")."""
    pods = gang_pods("g", 3, gang="g", min_available=3, created=T0, cpu="1")
    out = [
        replace(pods[0], node_name="n0", phase="Running"),
        replace(pods[1], node_name="n1", phase="Running"),
    ]
    if third == "pending":
        out.append(pods[2])
    return out


def test_a_stale_gang_whose_replacement_fits_at_its_due_pass_is_made_whole_not_evicted() -> None:
    """The replacement waited for room for the whole grace; in the pass that is due, the
    room is there (the blocker on n2 finished). check_stale runs before the gang's pending
    members are tried: the two running members are evicted and the replacement, which fits,
    is not placed. KAI's stalegangeviction runs after allocate."""
    nodes = [node(f"n{i}", cpu="1") for i in range(3)]
    blocker = pod("blocker", node_name="n2", phase="Running", cpu="1")
    first = schedule(snapshot(nodes, [*stale_gang(), blocker]), now=T0, config=STALE_60)
    assert bind_map(first) == {}
    assert first.memory[KEY].stale.due == T0 + 60
    done = replace(blocker, phase="Succeeded")
    due = schedule(
        snapshot(nodes, [*stale_gang(), done], memory=first.memory), now=T0 + 60, config=STALE_60
    )
    assert due.evictions == ()
    assert bind_map(due) == {"g-2": "n2"}


def test_a_stale_gang_is_evicted_once_not_again_in_each_pass_until_its_pods_are_deleted() -> None:
    """The pass after the eviction (the DisruptionTarget patch is itself a pod update, so
    it comes before the delete is seen) sees the same pods alive: it evicts them again,
    with a second StaleGang Event and the victims counted twice in the metric."""
    nodes = [node(f"n{i}", cpu="1") for i in range(3)]
    pods = stale_gang(third="")
    first = schedule(snapshot(nodes, pods), now=T0, config=STALE_60)
    due = schedule(snapshot(nodes, pods, memory=first.memory), now=T0 + 60, config=STALE_60)
    assert sorted(e.pod.name for e in due.evictions) == ["g-0", "g-1"]
    after = schedule(snapshot(nodes, pods, memory=due.memory), now=T0 + 61, config=STALE_60)
    assert after.evictions == ()
    assert events(after, "StaleGang") == []
    # Still seen alive a minute after: whatever still runs is evicted again.
    later = schedule(snapshot(nodes, pods, memory=after.memory), now=T0 + 121, config=STALE_60)
    assert sorted(e.pod.name for e in later.evictions) == ["g-0", "g-1"]


def test_a_stale_gang_evicted_again_after_the_retry_is_not_evicted_in_every_pass_after() -> None:
    """g-0, g-1 run, the third member is gone. Evicted at T0+60; still seen alive at T0+121
    (a delete that did not land): evicted again, the 60 s retry having passed. At T0+122
    they wait for the next retry (T0+181), counted from that eviction: they are evicted
    neither in this pass nor in each pass after it."""
    nodes = [node(f"n{i}", cpu="1") for i in range(3)]
    pods = gang(2, running=2, cpu="1")
    memory: dict = {}
    evictions = []
    for now in (T0, T0 + 60, T0 + 121, T0 + 122):
        result = schedule(snapshot(nodes, pods, memory=memory), now=now, config=STALE_60)
        memory = dict(result.memory)
        evictions.append(evicted(result))
    assert evictions[:3] == [[], ["g-0", "g-1"], ["g-0", "g-1"]]
    assert evictions[3] == [], evictions


def test_a_stale_gang_in_a_group_with_binds_in_flight_still_asks_for_its_due_pass() -> None:
    """GangGroup {a, b}: a runs 2 of its 3 (stale since T0, due T0+60); b's bind is in
    flight. The turn returns before a reaches check_stale, and Session.result re-arms
    stale.due only for gangs the snapshot left out: this pass asks for no wake at T0+60.
    (Harmless only if some later pass happens to run.)"""

    groups = ["default/a", "default/b"]
    a = gang_pods("a", 2, gang="a", min_available=3, groups=groups, created=T0)
    a = [replace(p, node_name=f"n{i}", phase="Running") for i, p in enumerate(a)]
    (b,) = gang_pods("b", 1, gang="b", min_available=1, groups=groups, created=T0)
    b = replace(b, node_name="n2")
    memory = {
        GangKey("default", "a"): GangState(satisfied=True, stale=Staleness(since=T0, due=T0 + 60))
    }
    nodes = [node(f"n{i}") for i in range(3)]
    snap = replace(snapshot(nodes, [*a, b], memory=memory), in_flight=frozenset({b.ref.uid}))
    result = schedule(snap, now=T0 + 10, config=STALE_60)
    assert result.memory[GangKey("default", "a")].stale.due == T0 + 60
    assert result.wake_at is not None
    assert result.wake_at <= T0 + 60, result.wake_at
