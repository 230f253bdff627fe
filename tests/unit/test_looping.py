"""The scheduling loop's pacing, with the real cache, binder, patcher and recorder, and a
local HTTP server in the API server's place: a pass is seen as the cache's ``dirty`` flag
cleared (taking the snapshot clears it)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, GangBinding, GroupBinding
from scheduler.model.pods import GangKey, PodRef
from scheduler.shell.binding import Binder
from scheduler.shell.looping import (
    APPLY_SLICE,
    EarlyBinds,
    FullCollections,
    SchedulingLoop,
    measure_lag,
)
from scheduler.shell.metrics import Metrics
from scheduler.shell.patching import Patcher
from scheduler.shell.recording import EventRecorder
from tests.unit.builders import SCHEDULER, node, pod, podgroup
from tests.unit.servers import server


async def _accept(request: web.Request) -> web.StreamResponse:
    return web.json_response({}, status=201 if request.method == "POST" else 200)


async def _until(done: Callable[[], bool], *, timeout: float) -> float:
    """Seconds until ``done()``; raises TimeoutError after ``timeout``."""
    started = time.perf_counter()
    while not done():
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"not done in {timeout} s")
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


def _loop(
    api: Any, cache: ClusterCache, metrics: Metrics, *, wake: asyncio.Event, **options: float
) -> SchedulingLoop:
    """The loop with the real binder, patcher and recorder, against ``api``."""
    recorder = EventRecorder(api, component=SCHEDULER)

    async def nothing() -> None:
        return None

    return SchedulingLoop(
        cache=cache,
        config=Config(),
        binder=Binder(api, cache, recorder, config=Config(), metrics=metrics),
        patcher=Patcher(api),
        recorder=recorder,
        wake=wake,
        sync=nothing,
        metrics=metrics,
        **options,
    )


def test_a_recount_waits_for_its_second_and_a_pending_pod_does_not() -> None:
    """A bound PodGroup member that starts running (a recount: nobody of its gang waits)
    gets its pass no sooner than ``recount_seconds`` after the last pass, with nothing else
    waking the loop; a new pending pod gets one at once."""
    member = pod("m", pod_group="pg", node_name="n0")
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_node(node("n0"))
    cache.upsert_podgroup(podgroup("pg", min_member=1))
    cache.upsert_pod(member)

    async def scenario() -> tuple[float, bool, float]:
        async with server(_accept) as api:
            wake = asyncio.Event()
            loop = _loop(api, cache, Metrics.create(), wake=wake, recount_seconds=2.0)
            task = asyncio.create_task(loop.run())
            try:
                await asyncio.wait_for(loop.first_pass.wait(), 10)
                await _until(lambda: not cache.dirty, timeout=10)
                cache.upsert_pod(pod("new", pod_group="pg"))  # urgent: placed at once
                wake.set()
                urgent = await _until(lambda: cache.waiting == 0, timeout=10)
                await asyncio.sleep(0.1)  # the pass that placed it has ended
                changed = time.perf_counter()
                cache.upsert_pod(replace(member, phase="Running"))  # a recount
                assert (cache.dirty, cache.urgent) == (True, False)
                wake.set()
                await asyncio.sleep(0.5)
                held = cache.dirty
                await _until(lambda: not cache.dirty, timeout=10)
                recount = time.perf_counter() - changed
                return urgent, held, recount
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    urgent, held, recount = asyncio.run(scenario())
    assert urgent < 1.0  # placed and bound well before a recount's 2 s
    assert held  # half a second after the wake, the recount still waited
    # Its pass came, with nothing else to wake the loop, 2 s after the last pass ended (a
    # little before the change); only a stall of the test over a second could make it less.
    assert 1.0 < recount < 5.0


def _groups(count: int) -> list[GroupBinding]:
    return [
        GroupBinding((GangBinding(GangKey("ns", f"g{i}"), (Binding(PodRef("ns", f"p{i}"), "n"),)),))
        for i in range(count)
    ]


def test_groups_committed_in_the_pass_thread_are_sent_in_order_a_slice_at_a_time() -> None:
    """A backlog of single pods commits thousands of groups: they reach the event loop in
    slices of APPLY_SLICE assumptions, the loop handed back in between."""
    groups = _groups(2 * APPLY_SLICE + 50)

    async def scenario() -> tuple[list[int], list[GroupBinding], set[int]]:
        sent: list[GroupBinding] = []
        early = EarlyBinds(asyncio.get_running_loop(), sent.append)
        thread = threading.Thread(target=lambda: [early.committed(g) for g in groups])
        thread.start()
        thread.join()
        seen = []  # how many were sent at each turn of the loop
        while len(sent) < len(groups):
            await asyncio.sleep(0)
            seen.append(len(sent))
        return seen, sent, early.sent

    seen, sent, ids = asyncio.run(scenario())
    assert sent == groups
    assert ids == {id(g) for g in groups}
    assert max(b - a for a, b in zip([0, *seen], seen, strict=False)) == APPLY_SLICE


def test_nothing_is_sent_early_once_the_pass_has_ended() -> None:
    groups = _groups(APPLY_SLICE + 10)

    async def scenario() -> tuple[int, set[int]]:
        sent: list[GroupBinding] = []
        early = EarlyBinds(asyncio.get_running_loop(), sent.append)
        for group in groups:
            early.committed(group)
        await asyncio.sleep(0)  # the first slice
        early.close()
        for group in _groups(3):
            early.committed(group)  # a cancelled pass's thread still deciding
        for _ in range(5):
            await asyncio.sleep(0)
        return len(sent), early.sent

    count, ids = asyncio.run(scenario())
    assert count == APPLY_SLICE  # the rest is the loop's to apply with the result
    assert ids == {id(g) for g in groups[:APPLY_SLICE]}


def test_full_garbage_collections_are_timed_while_the_lag_is_measured_and_not_after() -> None:
    """A full collection stops the event loop with every other thread: the lag watcher
    times each one (the gauge of the loop's longest stretch may be one), and takes its
    ``gc`` callback away when it stops."""
    metrics = Metrics.create()

    def collections() -> float:
        return metrics.registry.get_sample_value("gang_scheduler_gc_pause_seconds_count") or 0.0

    async def scenario() -> tuple[float, float]:
        task = asyncio.create_task(measure_lag(metrics))
        await asyncio.sleep(0)
        gc.collect(1)  # not a full one
        gc.collect()
        gc.collect()
        during = collections()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        gc.collect()
        return during, collections()

    during, after = asyncio.run(scenario())
    assert during >= 2  # the two asked for (an automatic one may come too)
    assert after == during


def test_a_stretch_says_how_much_of_it_the_loop_and_the_process_spent_on_cpu() -> None:
    """A handler that computes holds the loop on its own CPU; one that blocks while another
    thread of ours computes (as a wait for the GIL does) holds it as long on the process's
    CPU only; one that blocks on nothing of ours (as a wait for a core does) on neither: the
    log tells the three apart."""
    from structlog.testing import capture_logs  # noqa: PLC0415

    def spin(seconds: float) -> None:
        # By the thread's CPU, not the wall: on a busy machine a spin timed by the wall may
        # get less CPU than the test asks for.
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    async def scenario(hold: Callable[[float], None]) -> dict:
        with capture_logs() as logs:
            task = asyncio.create_task(measure_lag(Metrics.create(), interval=0.01))
            await asyncio.sleep(0.03)
            hold(0.3)
            await asyncio.sleep(0.03)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return next(e for e in logs if e["event"] == "event loop lag")

    def spin_elsewhere(seconds: float) -> None:
        # The loop's thread waits while another of the process's computes, as it does while
        # a pass's thread holds the GIL.
        other = threading.Thread(target=spin, args=(seconds,))
        other.start()
        other.join()

    computing = asyncio.run(scenario(spin))
    waiting = asyncio.run(scenario(time.sleep))
    elsewhere = asyncio.run(scenario(spin_elsewhere))
    assert computing["longest_milliseconds"] >= 250
    assert computing["longest_loop_cpu_milliseconds"] >= 120
    assert waiting["longest_milliseconds"] >= 250
    assert waiting["longest_loop_cpu_milliseconds"] < 40
    assert waiting["longest_process_cpu_milliseconds"] < 40
    assert elsewhere["longest_milliseconds"] >= 250
    assert elsewhere["longest_loop_cpu_milliseconds"] < 40
    assert elsewhere["longest_process_cpu_milliseconds"] >= 120


def test_a_slow_collection_is_logged_with_the_cpu_its_thread_spent_in_it() -> None:
    """A collection past 50 ms is logged with its wall time and its thread's CPU: one that
    worked the heap spent about all of it on CPU, one whose process waited for a core (as on
    a machine the control plane keeps busy) almost none, and no change to the heap would
    help that one. The callback is driven as ``gc`` drives it, around a spin or a sleep."""
    from structlog.testing import capture_logs  # noqa: PLC0415

    def spin(seconds: float) -> None:  # of CPU, however busy the machine is
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def collection(hold: Callable[[float], None]) -> dict:
        collections = FullCollections(Metrics.create())
        with capture_logs() as logs:
            collections("start", {"generation": 0})
            hold(0.12)
            collections("stop", {"generation": 0, "collected": 343})
        (logged,) = [e for e in logs if e["event"] == "garbage collected"]
        return logged

    working, waiting = collection(spin), collection(time.sleep)
    assert (working["generation"], working["collected"]) == (0, 343)
    assert working["milliseconds"] >= 120
    assert working["cpu_milliseconds"] >= 120
    assert waiting["milliseconds"] >= 120
    assert waiting["cpu_milliseconds"] < 40


def test_a_turn_that_raised_is_logged_with_its_action_and_gang_and_counted() -> None:
    """The core undid the turn and went on; the shell says so once, with the traceback, and
    counts it by action (what the GangSchedulerActionErrors alert watches)."""
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_node(node("n0"))
    cache.upsert_pod(replace(pod("broken"), requests=None))  # no codec makes this: a bug
    cache.upsert_pod(pod("fine"))

    async def scenario() -> tuple[Metrics, list[dict]]:
        async with server(_accept) as api:
            metrics = Metrics.create()
            loop = _loop(api, cache, metrics, wake=asyncio.Event())
            with structlog.testing.capture_logs() as logs:
                await loop.run_pass()
            await loop.drain()
            return metrics, logs

    metrics, logs = asyncio.run(scenario())
    errors = metrics.registry.get_sample_value(
        "gang_scheduler_action_errors_total", {"action": "allocate"}
    )
    assert errors == 1
    (said,) = [line for line in logs if line.get("action") == "allocate"]
    assert said["log_level"] == "error"
    assert said["gangs"] == ["default/pod/broken"]
    assert "AttributeError" in said["error"]
    assert "Traceback" in said["traceback"]
    assert (
        metrics.registry.get_sample_value(
            "gang_scheduler_gang_attempts_total", {"result": "scheduled"}
        )
        == 1
    )


def test_with_forecasts_on_a_waiting_gangs_podgroup_gets_its_expected_start() -> None:
    """A forward play in a worker thread, its result kept by the cache; the pass after it
    writes the estimate on the waiting gang's PodGroup."""
    from scheduler.model import names  # noqa: PLC0415

    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_node(node("n0", cpu="4"))
    lasts = {names.EXPECTED_DURATION: "5m"}
    for i in range(2):
        running = pod(f"r-{i}", gang="r", min_available=2, cpu="2", annotations=lasts)
        cache.upsert_pod(replace(running, node_name="n0", phase="Running", started=time.time()))
    cache.upsert_podgroup(podgroup("train", min_member=2))
    for i in range(2):
        cache.upsert_pod(pod(f"train-{i}", pod_group="train", cpu="2"))
    written: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/podgroups/train/status"):
            written.append(await request.text())
        return await _accept(request)

    async def scenario() -> None:
        async with server(answer) as api:
            metrics = Metrics.create()
            loop = _loop(api, cache, metrics, wake=asyncio.Event(), forecast_interval=0.1)
            task = asyncio.create_task(loop.run())
            try:
                await _until(lambda: any("EstimatedStart" in body for body in written), timeout=20)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    said = next(body for body in written if "EstimatedStart" in body)
    assert "expected to start at " in said
    assert "once default/r ended" in said
