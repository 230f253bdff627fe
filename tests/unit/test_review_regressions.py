"""Regression tests from the second review of #22 and #23 (healing of topology-placed
gangs, time-based fair share, the first review's fixes): each was a reproducer of one
finding, failing on the code as reviewed, and holds now."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.objects import pod_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, GangBinding, GroupBinding, Placement, Result
from scheduler.model.pods import GangKey
from scheduler.model.queues import QueueUsage
from scheduler.model.topology import Topology
from scheduler.shell.binding import Binder
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.servers import server
from tests.unit.test_allocation import bind_map
from tests.unit.test_network_topology import ZONES, group, members, on, running
from tests.unit.test_queue_sharing import in_queue, with_queues
from tests.unit.test_queues import queue
from tests.unit.test_topology_scheduling import SEED, six_nodes

GPU = "nvidia.com/gpu"

# -- healing of topology-placed gangs (c877af6): ranks ------------------------------------------


def _member(i: int, *, hard: bool = False, **kw: Any) -> Any:
    pack = json.dumps({"rack": {"type": "pack", "isHard": hard}})
    notes = {names.TOPOLOGY_CONSTRAINTS: pack}
    return pod(f"w-{i}", gang="w", min_available=3, annotations=notes, cpu="8", **kw)


def _ranks(result: Result) -> dict[str, int]:
    out = {}
    for g in result.bindings:
        for gb in g.gangs:
            if gb.placement is not None:
                out.update({ref.name: rank for ref, rank in gb.placement.ranks})
    return out


def test_a_member_healed_in_an_earlier_pass_keeps_its_rank_from_the_next_replacement() -> None:
    """Gang of 4 packed in rack-0 with ranks 0..3; w-1 and w-3 were lost. Pass 1 places
    the replacement w-1 (rank 1). Pass 2: w-1 is bound (the cache's assumption, or the API
    server's) but its rank label is not there yet (it is written after the bind, if at
    all); w-3's replacement comes: refill_ranks counts only labelled members as taken and
    hands out rank 1 again, so two pods of the gang carry rank 1 and rank 3 is nobody's."""
    base = [
        _member(0, node_name="node-0", phase="Running", labels={names.SAKKARA_RANK: "0"}),
        _member(2, node_name="node-1", phase="Running", labels={names.SAKKARA_RANK: "2"}),
    ]
    first = schedule(snapshot(six_nodes(), [*base, _member(1)], topology=SEED), now=T0)
    assert _ranks(first) == {"w-1": 1}
    healed = _member(1, node_name=bind_map(first)["w-1"], phase="Running")  # no label yet
    second = schedule(
        snapshot(six_nodes(), [*base, healed, _member(3)], topology=SEED, memory=first.memory),
        now=T0 + 1,
    )
    assert "w-3" in bind_map(second)
    assert _ranks(second) == {"w-3": 3}, _ranks(second)


def test_a_finished_members_rank_is_not_given_to_a_replacement() -> None:
    """Gang of 4 with ranks 0..3: w-1 (rank 1) finished (Succeeded), w-3 (rank 3) was lost
    and made again. refill_ranks counts only running members as taken, so the replacement
    of rank 3 gets rank 1, the rank of the finished member (its pod and label still
    there); rank 3 is nobody's."""
    pods = [
        _member(0, node_name="node-0", phase="Running", labels={names.SAKKARA_RANK: "0"}),
        _member(1, node_name="node-1", phase="Succeeded", labels={names.SAKKARA_RANK: "1"}),
        _member(2, node_name="node-2", phase="Running", labels={names.SAKKARA_RANK: "2"}),
        _member(3),
    ]
    result = schedule(snapshot(six_nodes(), pods, topology=SEED), now=T0)
    assert "w-3" in bind_map(result)
    assert _ranks(result) == {"w-3": 3}, _ranks(result)


def test_the_rank_labels_of_a_healed_member_are_written_back() -> None:
    """_place_pending_members hands the refilled ranks to the shell in a GroupBinding with
    all_or_nothing=False; Binder._apply returns before on_bound (the write-back of rank
    labels) for any group that is not all-or-nothing, so the healed member never gets its
    rank label (the core's Placement is dropped on the floor)."""
    cache = ClusterCache(scheduler_name="gang-scheduler")
    healed = pod_from_dict(
        {
            "metadata": {"name": "w-1", "namespace": "ns", "uid": "u1"},
            "spec": {"schedulerName": "gang-scheduler"},
        }
    )
    cache.upsert_pod(healed)
    placement = Placement(ranks=((healed.ref, 1),), tree="", retries=1, begin=T0)
    group_ = GroupBinding(
        (GangBinding(GangKey("ns", "w"), (Binding(healed.ref, "n0"),), placement=placement),),
        all_or_nothing=False,
    )
    written: list[GangBinding] = []

    async def on_bound(gang_binding: GangBinding, seconds: float) -> None:
        written.append(gang_binding)

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({}, status=201)

    async def run() -> None:
        async with server(handler) as api:
            binder = Binder(
                api, cache, EventRecorder(api, component="test"),
                config=Config(), metrics=Metrics.create(), on_bound=on_bound,
            )  # fmt: skip
            binder.assume(group_)
            await binder.apply(group_)

    asyncio.run(run())
    assert [b.placement for b in written] == [placement]


# -- the window of units (fa2448d) --------------------------------------------------------------


def test_a_retried_gang_tries_its_lowest_tier_first_when_all_units_fit_the_window() -> None:
    """ZONES (zone-a: rack-0 n0 n1, rack-1 n2 n3; zone-b: rack-2 n4 n5, rack-3 n6 n7),
    n3, n5 and n7 taken. A hard zone-tier gang of 2 one-GPU pods fits rack-0 whole. Its
    units: [rack-0, zone-b, zone-a] (3, well inside MAX_UNITS). At its first attempt it
    lands in rack-0; after one failed attempt (attempts=1) the window starts at
    16 % 3 = 1 and tries zone-b first: the gang is split over rack-2 and rack-3 although
    one rack holds it (the lowest tier first is lost whenever 16 * attempts % len(units)
    is not 0)."""
    nodes = [node(f"n{i}", gpu=1) for i in range(8)]
    taken = running(gang_pods("other", 3, gpu=1, created=T0), ["n3", "n5", "n7"])
    pods = [*members("dp", 2), *taken]
    pg = group("dp", min_member=2, tier=2)
    fresh = on(ZONES, nodes, pods, pg, now=T0)
    assert sorted(bind_map(fresh).values()) == ["n0", "n1"]
    # The same gang, having failed once (no zone had two free GPUs then): attempts=1.
    full = running(gang_pods("full", 3, gpu=1, created=T0), ["n1", "n2", "n6"])
    failed = on(ZONES, nodes, [*pods, *full], pg, now=T0)
    assert bind_map(failed) == {}
    key = GangKey("default", "dp")
    assert failed.memory[key].attempts == 1
    later = failed.memory[key].retry_at
    snap = replace(snapshot(nodes, pods, podgroups=[pg], memory=failed.memory), topology=ZONES)
    retried = schedule(snap, now=later)
    assert sorted(bind_map(retried).values()) == ["n0", "n1"], bind_map(retried)


def test_a_retried_gang_goes_to_a_unit_that_fits_now_among_the_first_16() -> None:
    """40 racks of two 8-CPU nodes; a hard rack-tier gang of two 5-CPU pods. In every rack
    one node has 7 CPUs free and the other 4: the summed room (11) passes, placement fails.
    The gang fails its first attempt (attempts=1). Then a pod on rack-00 finishes: its
    nodes have 5 and 5.5 free, the gang fits there, and rack-00 is the fullest unit (first
    in the list). The window of the second attempt starts at unit 16 and ends at unit 31:
    rack-00 is not tried, the gang fails again ("16 tried of 40"), backs off, and reaches
    rack-00 only after a full turn of the list (three more attempts, each after a longer
    backoff, or a flush when parked)."""
    racks = 40
    nodes = [node(f"n{i}", cpu="8") for i in range(2 * racks)]
    paths = {f"n{i}": (f"rack-{i // 2:02d}", f"n{i}") for i in range(2 * racks)}
    topo = Topology(name="t", levels=("rack", "node"), paths=paths)

    def fillers(first: str) -> list[Any]:
        out = []
        for r in range(racks):
            a, b = ("3", "2500m") if (r == 0 and first == "fits") else ("1", "4")
            out.append(pod(f"fa-{r}", cpu=a, node_name=f"n{2 * r}", phase="Running"))
            out.append(pod(f"fb-{r}", cpu=b, node_name=f"n{2 * r + 1}", phase="Running"))
        return out

    pg = group("dp", min_member=2, tier=1)
    dp = members("dp", 2, gpu=0, cpu="5")
    failed = schedule(
        replace(snapshot(nodes, [*dp, *fillers("no")], podgroups=[pg]), topology=topo), now=T0
    )
    assert bind_map(failed) == {}
    key = GangKey("default", "dp")
    assert failed.memory[key].attempts == 1
    later = failed.memory[key].retry_at
    snap = snapshot(nodes, [*dp, *fillers("fits")], podgroups=[pg], memory=failed.memory)
    retried = schedule(replace(snap, topology=topo), now=later)
    assert sorted(bind_map(retried).values()) == ["n0", "n1"], [
        e.message for e in retried.events if e.reason == "FailedScheduling"
    ]


# -- stale gangs (fa2448d): the 60 s retry --------------------------------------------------------


def test_a_stale_gang_evicted_again_after_the_retry_is_not_evicted_in_every_pass_after() -> None:
    """g-0, g-1 run, the third member is gone. Evicted at T0+60; still seen alive at T0+121
    (a delete that did not land): evicted again, stale.due set to T0+121. At T0+122 they
    should wait for the next retry (T0+181); check_stale recomputes due = since + grace,
    finds stale.due != due, resets it to T0+60, and now >= due + 60 again: it evicts them
    in this pass, and in every pass after, as before the fix."""
    stale = Config(stale_gang_seconds=60.0)
    nodes = [node(f"n{i}", cpu="1") for i in range(3)]
    pods = gang_pods("g", 2, gang="g", min_available=3, created=T0, cpu="1")
    pods = [replace(p, node_name=f"n{i}", phase="Running") for i, p in enumerate(pods)]
    memory: dict = {}
    evicted = []
    for now in (T0, T0 + 60, T0 + 121, T0 + 122):
        result = schedule(snapshot(nodes, pods, memory=memory), now=now, config=stale)
        memory = dict(result.memory)
        evicted.append(sorted(e.pod.name for e in result.evictions))
    assert evicted[:3] == [[], ["g-0", "g-1"], ["g-0", "g-1"]]
    assert evicted[3] == [], evicted


# -- time-based fair share (2c21b32) --------------------------------------------------------------


def test_a_trace_of_past_usage_of_a_resource_nobody_wants_now_does_not_put_a_queue_last() -> None:
    """n0: 8 CPUs, 1 GPU. team-b holds 4 CPUs; team-a holds nothing. Each waits with a
    gang of one 4-CPU pod: room for one. team-a used one GPU briefly about 100 minutes ago
    (its recent GPU average has decayed to 1/1024 of a GPU). Nobody wants a GPU now, so
    every fair share of GPUs is 0 (capped by demand), and QueueBook.standing makes team-a's
    (0 + 1/1024) / 2 / 0 = inf: team-a is put behind team-b, which holds half the cluster,
    although by CPUs (held now and lately) team-a is far below its share. Any trace of a
    resource nobody wants now (until it decays below 1e-9) puts a queue last."""
    a = pod("a-0", cpu="4", gang="a", min_available=1, labels=in_queue("team-a"), created=T0)
    b = pod("b-0", cpu="4", gang="b", min_available=1, labels=in_queue("team-b"), created=T0)
    held = pod("b-run", cpu="4", node_name="n0", phase="Running", labels=in_queue("team-b"))
    snap = with_queues(
        snapshot([node("n0", cpu="8", gpu=1)], [a, b, held]), queue("team-a"), queue("team-b")
    )
    assert bind_map(schedule(snap, now=T0)) == {"a-0": "n0"}  # DRF
    lately = QueueUsage(T0 - 60, {"team-a": {GPU: 1.0 / 1024}, "team-b": {"cpu": 4000.0}})
    config = Config(fair_share_half_life_seconds=600.0)
    result = schedule(replace(snap, queue_usage=lately), now=T0, config=config)
    assert bind_map(result) == {"a-0": "n0"}, bind_map(result)


def test_the_gap_since_the_last_update_is_counted_at_what_was_held_then_not_now() -> None:
    """Passes run only when something changed, so usage is updated rarely while the cluster
    is quiet, and the pass that comes is the one a change brings. Four one-GPU nodes:
    team-a held three GPUs from the last update (30 min ago, three half-lives) until its job
    finished just now; team-b has held one all along and holds it now. Each waits with a
    gang of 2 GPUs, room for one (3 free). The architecture says the last pass's holdings
    stand for the gap ("the last pass's holdings being all the core knows"): team-a's
    average stays near 3 GPUs (standing 0.75 against b's 0.5), and team-b goes first.
    Counted at what is held now (team-a: 0), team-a's past shrank to 3/8 of a GPU (standing
    0.09) and it went first, as if the half hour of three GPUs had not been."""
    a = gang_pods("a", 2, gang="a", min_available=2, gpu=1, labels=in_queue("team-a"), created=T0)
    b = gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("team-b"), created=T0)
    held = pod("b-run", gpu=1, node_name="n0", phase="Running", labels=in_queue("team-b"))
    nodes = [node(f"n{i}", gpu=1) for i in range(4)]
    snap = with_queues(snapshot(nodes, [*a, *b, held]), queue("team-a"), queue("team-b"))
    then = {"team-a": {GPU: 3.0}, "team-b": {GPU: 1.0}}
    lately = QueueUsage(T0 - 1800, then, held=then)
    config = Config(fair_share_half_life_seconds=600.0)
    result = schedule(replace(snap, queue_usage=lately), now=T0, config=config)
    assert set(bind_map(result)) == {"b-0", "b-1"}, bind_map(result)
