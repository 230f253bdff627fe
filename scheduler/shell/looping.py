"""The scheduling loop: wait for a reason, take a snapshot, decide, apply, repeat.

A pass runs when the cache changed (a watch event poked it) or when something the last pass
scheduled falls due (a backoff ends, a timeout expires). Bursts of events are batched into
one pass. The pass itself runs in a worker thread over the frozen snapshot, so watch events,
binds and the Lease renewal go on meanwhile (the event loop gets the interpreter at least
every switch interval); at most one pass is in flight. Decisions are applied back on the
event loop: the loop assumes bindings in the cache at once, so the next pass can run while
the binds are still in flight. Each GangGroup's binds are handed over as the pass commits
them, before the pass ends; the rest of the result once it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from itertools import islice

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.core import fragmentation
from scheduler.core.forecasting import PlayCancelled, forecast
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.decisions import NORMAL, Event, Eviction, GroupBinding, ObjectRef, Result
from scheduler.model.snapshot import Snapshot
from scheduler.shell.binding import Binder
from scheduler.shell.metrics import Metrics
from scheduler.shell.patching import Patcher
from scheduler.shell.recording import EventRecorder

log = structlog.get_logger()

# Assumptions made in one go before the event loop is handed back (about 10 ms of work).
APPLY_SLICE = 200


class EarlyBinds:
    """The GangGroups a running pass has committed, handed from its thread to the event loop
    and sent, a slice at a time (``APPLY_SLICE`` assumptions, then the loop is handed back:
    one call per group queued behind each other held the loop for 0.2 s in a backlog of
    2,000 single pods). Closed once the pass has ended: what is left is the loop's to apply
    with the rest of the result (every group not in ``sent``)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, send: Callable[[GroupBinding], None]
    ) -> None:
        self._loop = loop
        self._send = send
        self._lock = threading.Lock()
        self._waiting: deque[GroupBinding] = deque()
        self._scheduled = False  # a drain is queued on the loop
        self.closed = False
        self.sent: set[int] = set()  # by id: the groups are the pass's result's own

    def committed(self, group: GroupBinding) -> None:
        """In the pass's thread."""
        with self._lock:
            self._waiting.append(group)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the event loop closed under a shutdown
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        assumed = 0
        while not self.closed and assumed < APPLY_SLICE:
            with self._lock:
                if not self._waiting:
                    self._scheduled = False
                    return
                group = self._waiting.popleft()
            self.sent.add(id(group))
            self._send(group)
            assumed += len(group.bindings)
        if not self.closed:
            self._loop.call_soon(self._drain)

    def close(self) -> None:
        """The pass has ended (or was given up): nothing more is sent early."""
        self.closed = True


class SchedulingLoop:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        config: Config,
        binder: Binder,
        patcher: Patcher,
        recorder: EventRecorder,
        wake: asyncio.Event,
        sync: Callable[[], Awaitable[None]],
        metrics: Metrics,
        settled: Callable[[], Awaitable[None]] | None = None,
        batch_seconds: float = 0.02,
        recount_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
        forecast_interval: float = 0.0,
    ) -> None:
        self._cache = cache
        self._config = config
        self._binder = binder
        self._patcher = patcher
        self._recorder = recorder
        self._batch_seconds = batch_seconds
        # A pass for changes that only recount PodGroups' members (``ClusterCache.urgent``)
        # waits this long after the last pass; any other change ends the wait.
        self._recount_seconds = recount_seconds
        self._clock = clock
        self._wake = wake  # set by watch handlers and by the binder: "run a pass soon"
        self._sync = sync
        # Awaited before each pass: the cache is whole (no re-list check pending).
        self._settled = settled
        self._metrics = metrics
        self._tasks: set[asyncio.Task[None]] = set()
        self._topology_notes: tuple[str, ...] = ()  # said once per change
        # Set once the first pass has been applied (its binds handed to the binder) or has
        # failed: what may wait for the first binds (loading kopf's frame) waits for this.
        self.first_pass = asyncio.Event()
        # The forward play (--forecast-interval; 0: none): at most one at a time, in a worker
        # thread, begun from a pass's snapshot no sooner than the interval, nor than twice
        # what the last play took, after the last began.
        self._forecast_interval = forecast_interval
        self._forecast_due = 0.0
        self._forecasting: asyncio.Task[None] | None = None
        # Set when the loop stops: a play in its thread stops at its next virtual pass
        # (a shutdown waits for the executor's threads).
        self._forecast_stop = threading.Event()

    def poke(self) -> None:
        """Something changed: run a pass soon."""
        self._wake.set()

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            # Stopped (cancelled, the Lease lost): a play in its thread ends at its next
            # virtual pass, and its task goes.
            self._forecast_stop.set()
            if self._forecasting is not None:
                self._forecasting.cancel()

    async def _run(self) -> None:
        while True:
            try:
                await self._sync()
                break
            except Exception:  # the API server may not be up yet: keep trying
                log.exception("could not list the cluster; retrying in 2s")
                await asyncio.sleep(2)
        wake_at: float | None = None
        last_pass = 0.0
        passed_at = -math.inf  # when the last pass ended (perf_counter)
        while True:
            timeout = None if wake_at is None else max(wake_at - self._clock(), 0.0)
            if self._cache.dirty:  # only recounts wait (below): until they are due
                recount = max(passed_at + self._recount_seconds - time.perf_counter(), 0.0)
                timeout = recount if timeout is None else min(timeout, recount)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            # Let a burst of events land first. Under load, passes grow with the cluster:
            # waiting twice as long as the last pass took keeps passes to a third of the CPU
            # and leaves the rest to watching and binding.
            await asyncio.sleep(max(self._batch_seconds, 2 * last_pass))
            self._wake.clear()
            due = wake_at is not None and self._clock() >= wake_at
            if not (self._cache.dirty or due):
                continue  # woken by changes no pass can act on (a single pod's bind confirmed)
            recounting = not (self._cache.urgent or due)
            if recounting and time.perf_counter() - passed_at < self._recount_seconds:
                # Only bound members of PodGroup gangs with nobody waiting changed: a pass
                # would recount their statuses, no sooner than ``recount_seconds`` after the
                # last pass ended (the wait's timeout above brings the loop back then).
                continue
            if self._settled is not None:
                await self._settled()
            started = time.perf_counter()
            try:
                wake_at = await self.run_pass()
            except Exception:  # a bad pass must not stop scheduling for good
                log.exception("scheduling pass failed; retrying in 1s")
                wake_at = self._clock() + 1.0
            self.first_pass.set()
            passed_at = time.perf_counter()
            last_pass = passed_at - started

    async def run_pass(self) -> float | None:
        """One pass: the snapshot is taken and the result applied on the event loop; the
        decision, a pure function of the snapshot, is made in a worker thread."""
        started = time.perf_counter()
        now = self._clock()
        snapshot = self._cache.snapshot(now=now)
        self._maybe_forecast(snapshot, now)
        loop = asyncio.get_running_loop()
        # The pass's seconds, once its memory is in the cache: what the binder does after a
        # bind that reads or writes a gang's memory waits for it (``Binder.apply``).
        decided: asyncio.Future[float] = loop.create_future()
        early = EarlyBinds(loop, lambda group: self._send(group, decided))
        try:
            try:
                result = await asyncio.to_thread(
                    schedule, snapshot, now=now, config=self._config, committed=early.committed
                )
            except BaseException:
                # What the snapshot took as "changed since the last pass" was not acted on:
                # the next pass looks at everything.
                self._cache.look_at_everything()
                raise
            self._cache.remember(dict(result.memory))
            self._cache.queue_usage = result.queue_usage
            if result.topology is not None:  # else no gang of the pass states a tier
                self._cache.placed_on = result.topology
        finally:
            # Sent binds go on whatever happened; what a cancelled pass's thread still decides
            # is not sent.
            early.close()
            decided.set_result(time.perf_counter() - started)
        # Passes without topology-placed gangs do not look at the tree and say nothing.
        if result.topology_notes and result.topology_notes != self._topology_notes:
            self._topology_notes = result.topology_notes
            for note in result.topology_notes:
                log.warning(note)
        await self._apply(result, sent=early.sent, decided=decided)
        self._observe(result, time.perf_counter() - started)
        if result.bindings:
            log.debug(
                "pass",
                bindings=sum(len(g.bindings) for g in result.bindings),
                seconds=round(time.perf_counter() - started, 4),
                # Where each pod goes, for a post-mortem: the first 200, built lazily (the
                # pass's thread is waited on; a backlog binds thousands a pass).
                placed=list(
                    islice(
                        (f"{b.pod.name}@{b.node}" for g in result.bindings for b in g.bindings), 200
                    )
                ),
            )
        return result.wake_at

    def _maybe_forecast(self, snapshot: Snapshot, now: float) -> None:
        if not self._forecast_interval or self._forecasting is not None:
            return
        if not self._cache.waiting:
            self._cache.forecasts.forget()
            return
        if time.monotonic() < self._forecast_due:
            return
        # Every pod of ours: the snapshot leaves out the gangs nothing woke. Its own CEL
        # selectors: the cache's are the pass thread's, and not made for two threads.
        view = replace(snapshot, pods=self._cache.ours(), selectors=None)
        self._forecast_due = time.monotonic() + self._forecast_interval
        self._forecasting = asyncio.get_running_loop().create_task(self._forecast(view, now))

    async def _forecast(self, view: Snapshot, now: float) -> None:
        started = time.monotonic()
        try:
            found = await asyncio.to_thread(
                forecast, view, now=now, config=self._config, cancelled=self._forecast_stop.is_set
            )
        except PlayCancelled:
            return
        except Exception:  # a bad play must not stop the forecasts, nor the passes
            log.exception("forward play failed; the next comes at the interval")
            self._metrics.background_errors.labels(worker="forecaster").inc()
        else:
            self._cache.keep_forecast(found)
            seconds = time.monotonic() - started
            self._metrics.forecast_seconds.observe(seconds)
            self._forecast_due = max(self._forecast_due, time.monotonic() + seconds)
            log.info(
                "forward play",
                gangs=len(found.etas),
                passes=found.passes,
                seconds=round(seconds, 2),
            )
            self.poke()
        finally:
            self._forecasting = None

    def _observe(self, result: Result, seconds: float) -> None:
        metrics = self._metrics
        metrics.pass_seconds.observe(seconds)
        for attempt in result.attempts:
            metrics.attempts.labels(result=attempt.verdict.value).inc(len(attempt.gangs))
        for error in result.errors:
            metrics.action_errors.labels(action=error.action or "none").inc()
            log.error(
                "an action failed on a GangGroup; its turn was undone and the pass went on",
                action=error.action,
                gangs=[str(key) for key in error.gangs],
                error=error.error,
                traceback=error.detail,
            )
        metrics.pending_gangs.set(result.pending_gangs)
        # After the pass's bindings were assumed: what is still waiting (parked gangs too,
        # which the snapshot left out).
        metrics.queue_depth.set(self._cache.waiting)

    def _spawn(self, coroutine: object) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send(self, group: GroupBinding, decided: asyncio.Future[float]) -> None:
        self._binder.assume(group)
        self._spawn(self._binder.apply(group, decided=decided))

    async def _apply(
        self, result: Result, *, sent: set[int], decided: asyncio.Future[float]
    ) -> None:
        """Assume and send off each GangGroup's binds not sent yet (a pass with claims sends
        none early). A backlog pass decides thousands: the event loop is handed back every
        few hundred assumptions, so watch events and the binds already sent go on meanwhile
        (no pass runs before this returns)."""
        assumed = 0
        for group in result.bindings:
            if id(group) in sent:
                continue
            self._send(group, decided)
            assumed += len(group.bindings)
            if assumed >= APPLY_SLICE:
                assumed = 0
                await asyncio.sleep(0)
        for patch in result.pod_patches:
            self._spawn(self._patcher.pod(patch))
        for condition in result.pod_conditions:
            self._spawn(self._patcher.condition(condition))
        for choice in result.victim_choices:
            self._metrics.victims_above_fewest.labels(action=choice.action).observe(
                choice.above_fewest
            )
        for eviction in result.evictions:
            if eviction.stale:
                self._metrics.stale_gang_victims.inc()
            elif eviction.moved_to:
                self._metrics.consolidation_moves.inc()
            elif eviction.reclaimed_from:
                self._metrics.reclaim_victims.labels(queue=eviction.reclaimed_from).inc()
            else:
                self._metrics.preemption_victims.labels(priority=str(eviction.priority)).inc()
            if eviction.stale:
                continue  # the pass said StaleGang on the gang and its pods already
            ref = eviction.pod
            self._recorder.emit(
                Event(
                    ObjectRef("Pod", ref.namespace, ref.name, ref.uid),
                    NORMAL,
                    # As the descheduler says of the pods it evicts to be placed again.
                    "Descheduled" if eviction.moved_to else "Preempted",
                    eviction.message,
                )
            )
        if result.evictions:
            # Going from now on, for the passes that come before the watch shows it.
            self._cache.assume_leaving(e.pod.uid for e in result.evictions)
            # Sent together: every mark of the pass before any delete (``Patcher.evict``).
            self._spawn(self._evict(result.evictions))
        for nomination in result.nominations:
            self._spawn(self._patcher.nominate(nomination))
        for namespace, name in result.stale_claims:
            self._spawn(self._patcher.delete_made_claim(namespace, name))
        for leftover in result.volume_releases:
            self._spawn(self._binder.volumes.release(leftover))
        for update in result.status_updates:
            self._spawn(self._patcher.status(update))
        for event in result.events:
            self._recorder.emit(event)

    async def _evict(self, evictions: tuple[Eviction, ...]) -> None:
        staying: Iterable[str] = {e.pod.uid for e in evictions}
        try:
            staying = await self._patcher.evict(evictions)
        finally:
            self._cache.settle_leaving(staying)

    async def drain(self) -> None:
        """Wait for the writes in flight (used on shutdown and in tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


async def measure_fragmentation(
    cache: ClusterCache, metrics: Metrics, *, interval: float = 5.0
) -> None:
    """The fragmentation gauges, from the cache's room as of the last pass, every
    ``interval`` seconds: O(nodes), off the passes. The inputs are copied on the event loop;
    the measure walks every node for each waiting shape (80 ms of CPU at 5,000 nodes and a
    backlog of 30,000 pods, all of it one stretch of the loop's), so it runs in a worker
    thread, which the interpreter switches away from every few milliseconds."""
    shown: set[str] = set()  # the levels the stranded-by-topology gauge has
    while True:
        free, allocatable, waiting = cache.room()
        found = await asyncio.to_thread(
            fragmentation.measure,
            free,
            allocatable=allocatable,
            waiting=waiting,
            topology=cache.placed_on,
            needs=cache.tier_needs(),
        )
        for resource in fragmentation.MEASURED:
            metrics.stranded.labels(resource=resource).set(found.stranded.get(resource, 0))
        for level, gpus in found.stranded_by_tier.items():
            metrics.stranded_by_topology.labels(level=level).set(gpus)
        for level in shown - found.stranded_by_tier.keys():  # no gang waits held to it
            metrics.stranded_by_topology.remove(level)
        shown = set(found.stranded_by_tier)
        metrics.placeable_members.set(found.placeable)
        metrics.whole_gpu_nodes.set(found.whole_gpu_nodes)
        await asyncio.sleep(interval)


class FullCollections:
    """Times the interpreter's garbage collections, as a ``gc`` callback: one stops every
    thread, the event loop's included, while it walks the objects of its generations (a full
    one, generation 2, every object the process holds: 0.1 s for a cache of 10,000 nodes and
    60,000 small pods), so the loop's longest stretches at scale may be these rather than our
    code. Full ones are observed in ``gc_pause_seconds``; any collection past 50 ms is logged
    with its generation, beside the stretches it explains, and with the CPU its thread spent
    in it: on a busy machine a collection can take longer than its work, the process waiting
    for a core. With the thresholds ``cli`` sets, generation 0 is collected once 50,000 more
    objects were made than freed, and each collection walks every young object. That count
    does not bound them: an old object freed lowers it, so a cache that replaces its pods as
    fast as it makes new ones piles up young objects without a collection (300,000 replaced:
    count 8, 600,004 young, 52 ms to collect them). At 10,000 nodes young collections took
    92-135 ms of CPU (160-188 ms wall), one of generation 1 427 ms: work, not waits."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._started = self._cpu = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started, self._cpu = time.perf_counter(), time.thread_time()
            return
        seconds = time.perf_counter() - self._started
        generation = info.get("generation")
        if generation == 2:
            self._metrics.gc_pause_seconds.observe(seconds)
        if seconds > 0.05:
            log.info(
                "garbage collected",
                generation=generation,
                milliseconds=round(seconds * 1000, 1),
                cpu_milliseconds=round((time.thread_time() - self._cpu) * 1000, 1),
                collected=info.get("collected", 0),
            )


async def measure_lag(metrics: Metrics, *, interval: float = 0.02) -> None:
    """Time how late a short timer fires, forever: the longest stretch for which the event
    loop was held (by a handler, a pass, a JSON decode, a full garbage collection) is what
    the watches, the binds and the Lease renewal had to wait. Logged when it grows past
    50 ms, and on cancel; collections are timed beside it. Each stretch is logged with the
    CPU the loop's own thread spent in it, and the whole process's: the loop's is handlers
    (or a collection) on the loop; the rest of the process's is our other threads (a pass,
    a census) holding the GIL while the loop waited for it; the wall time beyond the
    process's is a wait for a CPU (other processes), which no change of ours would
    shorten."""
    longest = longest_cpu = longest_process = 0.0
    collections = FullCollections(metrics)
    gc.callbacks.append(collections)
    try:
        while True:
            started, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
            await asyncio.sleep(interval)
            lag = max(time.perf_counter() - started - interval, 0.0)
            metrics.loop_lag_seconds.observe(lag)
            if lag > longest:
                longest, longest_cpu = lag, time.thread_time() - cpu
                longest_process = time.process_time() - process
                metrics.loop_lag_max_seconds.set(lag)
                if lag > 0.05:
                    log.info(
                        "event loop held",
                        milliseconds=round(lag * 1000, 1),
                        loop_cpu_milliseconds=round(longest_cpu * 1000, 1),
                        process_cpu_milliseconds=round(longest_process * 1000, 1),
                    )
    finally:
        gc.callbacks.remove(collections)
        log.info(
            "event loop lag",
            longest_milliseconds=round(longest * 1000, 1),
            longest_loop_cpu_milliseconds=round(longest_cpu * 1000, 1),
            longest_process_cpu_milliseconds=round(longest_process * 1000, 1),
        )
