"""The operator: the wiring of the shell, and kopf's frame beside it (``scheduler.frame``).

kopf runs the liveness probe, in a thread of its own; signals, start-up and shut-down are
ours. The cluster comes into the cache through our own informers
(``shell.watching.Informer``, one per kind) and Sakkara's ConfigMaps through a
label-selected watch; nothing here decides anything. kopf does not watch the kinds: its
per-event machinery would be a third of the process at 1,000 nodes, it resolves the kinds it
watches only once (a scheduler started while the API server restarted could miss some for
good), and it never says when a LIST is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.cel import Selectors
from scheduler.frame import Frame, Runtime
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.shell.api import ApiClient, Credentials, RateLimiter
from scheduler.shell.binding import Binder
from scheduler.shell.claiming import release_leftover_claims
from scheduler.shell.clocks import SteadyClock
from scheduler.shell.configmaps import apply_configmap
from scheduler.shell.electing import LeaderElector, Leadership
from scheduler.shell.health import Health, Unhealthy, keep_watch
from scheduler.shell.kinds import INFORMED
from scheduler.shell.looping import SchedulingLoop, measure_fragmentation, measure_lag
from scheduler.shell.metrics import Metrics
from scheduler.shell.patching import Patcher
from scheduler.shell.queueing import QueueKeeper
from scheduler.shell.recording import EventRecorder
from scheduler.shell.syncing import wait_until_synced
from scheduler.shell.watching import Informer, Informers, LabelWatch

log = structlog.get_logger()


# A first sync that takes longer means some watch never started: exit to be restarted.
SYNC_LIMIT_SECONDS = 60.0

# Events in flight at once once binds are done: a backlog's 5,000 Scheduled Events took 18 s
# after its last bind with 4 workers, 9 to 14 s with 16, 7.5 s with 48 (make bench, 2
# cores), each POST waiting on an API server busy with KWOK's status updates rather than on
# our CPU. Of them, EVENTS_BESIDE_BINDS post while binds are in flight too, so that Events
# do not all wait for a backlog's last bind.
EVENT_WORKERS = 48
EVENTS_BESIDE_BINDS = 4

# kopf's frame is started once the first pass's binds are done, or this long after start.
FRAME_AFTER_SECONDS = 5.0


def _stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set the stop flag, for the whole run (kopf, off the main thread,
    installs no handlers of its own)."""
    if threading.current_thread() is not threading.main_thread():
        return  # signals reach the main thread only (tests run the operator in others)
    running = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        running.add_signal_handler(sig, stop.set)


async def _quiet_after_first_pass(
    loop: SchedulingLoop, *, busy: Callable[[], bool], stop: asyncio.Event
) -> None:
    """Wait to start kopf's frame until the first pass has been applied and its binds are
    done, or for FRAME_AFTER_SECONDS (a standby waits for the Lease; the API server may be
    out of reach; a big backlog binds for longer).

    kopf runs only the frame (the probe), and loading it is about a quarter of a second of
    the interpreter: beside the first LISTs and the first pass it delayed the first bind,
    and beside the first binds it slowed them."""

    async def quiet() -> None:
        await loop.first_pass.wait()
        while busy():
            await asyncio.sleep(0.05)

    waiters = [asyncio.ensure_future(quiet()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(
            waiters, timeout=FRAME_AFTER_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in waiters:
            waiter.cancel()


def _elector(
    api: ApiClient, *, config: Config, leader_election: tuple[str, str, float] | None
) -> LeaderElector | None:
    if leader_election is None:
        return None
    namespace, identity, lease_seconds = leader_election
    return LeaderElector(
        api,
        namespace=namespace,
        name=config.scheduler_name,
        identity=identity,
        lease_seconds=lease_seconds,
        renew_seconds=max(lease_seconds / 3, 0.5),
        retry_seconds=max(lease_seconds / 7.5, 0.2),
    )


def _metrics(port: int | None) -> Metrics:
    metrics = Metrics.create()
    if port:
        metrics.serve(port)
    return metrics


def _configmap_watches(
    api: ApiClient,
    cache: ClusterCache,
    *,
    loop: SchedulingLoop,
    metrics: Metrics,
    topology_namespace: str,
) -> list[asyncio.Task[None]]:
    """Sakkara's ConfigMaps by label selector, filtered by the API server (not through
    kopf, which would watch every ConfigMap in the cluster)."""

    def on_configmap(kind: str, body: dict) -> None:
        apply_configmap(
            cache, body, deleted=kind == "DELETED", topology_namespace=topology_namespace
        )
        loop.poke()

    return [
        asyncio.create_task(
            LabelWatch(
                api,
                path="/api/v1/configmaps",
                selector=label,
                on_event=on_configmap,
                errored=metrics.background_errors.labels(worker="watch").inc,
            ).run(),
            name=f"watch {label}",
        )
        for label in (names.SAKKARA_TOPOLOGY, names.SAKKARA_GROUP)
    ]


async def run_operator(  # noqa: PLR0915 (the wiring of the whole shell, in one place)
    *,
    credentials: Credentials,
    config: Config,
    bind_concurrency: int = 32,
    liveness_endpoint: str | None = None,
    metrics_port: int | None = None,
    topology_namespace: str = "gang-scheduler-system",
    leader_election: tuple[str, str, float] | None = None,
    stop: asyncio.Event | None = None,
    unreachable_limit: float = 60.0,
    api_rate_limit: tuple[float, int] | None = None,
    forecast_interval: float = 0.0,
) -> None:
    """Run the watches and the scheduling loop until ``stop`` is set (or forever).

    With ``leader_election`` = (namespace, identity, lease seconds), the watches run at once
    (a standby keeps its cache warm) but the loop starts only once this replica holds the
    Lease; losing it stops the operator and raises LostLeadership. A watch that ends for
    good stops it with Unhealthy; an API server silent for ``unreachable_limit`` seconds
    fails /healthz. ``api_rate_limit`` = (qps, burst) limits our own requests as client-go
    limits kube-scheduler's (LISTs and the opening of watches count, as in client-go).
    ``forecast_interval``: seconds between forward plays (``SchedulingLoop``); 0: none.
    """
    cache = ClusterCache(
        scheduler_name=config.scheduler_name,
        aliases=config.aliases,
        selectors=Selectors().evaluate,
    )
    api = ApiClient(
        credentials,
        # A watch holds a connection for as long as it runs (one per kind, and the
        # ConfigMaps'); the binds and the Events each get theirs beside them.
        connections=bind_concurrency + EVENT_WORKERS + len(INFORMED) + 16,
        rate_limit=RateLimiter(qps=api_rate_limit[0], burst=api_rate_limit[1])
        if api_rate_limit
        else None,
    )
    metrics = _metrics(metrics_port)
    binder: Binder
    recorder = EventRecorder(
        api,
        component=config.scheduler_name,
        component_of=lambda ref: cache.scheduler_name_of(ref.uid) if ref.kind == "Pod" else None,
        busy=lambda: binder.in_flight > 0,
        workers=EVENT_WORKERS,
        beside_binds=EVENTS_BESIDE_BINDS,
        dropped=metrics.events_dropped.inc,
        errored=metrics.background_errors.labels(worker="events").inc,
    )
    wake = asyncio.Event()
    clock = SteadyClock()
    # A write that failed is sent again by the next pass, not at once: a write refused for
    # good (403 on a status, a webhook) would otherwise run passes back to back.
    patcher = Patcher(
        api,
        clock=clock,
        retry=cache.touch_gang,
        retry_pod=cache.touch_pod,
        errored=metrics.background_errors.labels(worker="patcher").inc,
        # Behind the Events as well (still at most its 10 s): a backlog's Events, one per pod
        # and what a user reads first, were slowed by its statuses (~2.5 ms of API server CPU
        # each) after the last bind.
        busy=lambda: binder.in_flight > 0 or recorder.pending > 0,
        fence=lambda: leadership.held(),  # noqa: PLW0108 (leadership is made below)
        pod_known=cache.knows_pod,
        pod_placed=cache.placed,
        gang_known=cache.knows_gang,
        identity=config.scheduler_name,
    )
    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    lost: list[BaseException] = []

    def lose(error: BaseException) -> None:
        """Leadership lost, or a watch dead: stop scheduling now, then the operator."""
        log.error("stopping", reason=str(error))
        lost.append(error)
        scheduling.cancel()
        stop.set()

    leadership = Leadership(
        _elector(api, config=config, leader_election=leader_election), on_lost=lose
    )
    metrics.leader.set_function(lambda: 1.0 if leadership.held() else 0.0)

    binder = Binder(
        api,
        cache,
        recorder,
        config=config,
        metrics=metrics,
        concurrency=bind_concurrency,
        poke=wake.set,
        clock=clock,
        on_bound=patcher.placement,
        fence=leadership.held,
        remaining=leadership.remaining,
    )

    async def sync_then_lead() -> None:
        """Sync first: a replica whose watches never deliver must not hold the Lease (the
        standby could not take over). The informers retry for as long as it takes; one
        that has not delivered its first LIST within the limit means the API server is
        out of reach (or refuses us): exit, be restarted, and say so."""
        try:
            async with asyncio.timeout(SYNC_LIMIT_SECONDS):
                await wait_until_synced(api, cache, listed=informers.listed)
        except TimeoutError as error:
            why = str(error) or (
                f"the watches did not deliver the cluster within {SYNC_LIMIT_SECONDS:.0f}s; "
                f"not yet listed: {informers.unlisted() or 'none'}"
            )
            lose(Unhealthy(f"{why} (started while the API server was unavailable?)"))
            raise
        await leadership.acquire()
        if leader_election is not None:
            # A standby's watches may lag behind what the old leader bound (both were cut
            # off by the same outage, say): a pass on that cache would overcommit nodes.
            informers.everything()
            await informers.settled()
        # Before the first pass, nothing of ours is being bound: a claim reserved for a pod
        # of ours that is not bound was left by a stop between a group's claims and its
        # binds. Released (the allocation too, once nobody is left), the gang is placed
        # again whole; kept, it would pin the gang to devices chosen for a placement that
        # never happened.
        await release_leftover_claims(api, cache, fence=leadership.held)

    # One informer per kind (``shell.watching``); the first pass waits for their first LISTs.
    informers = Informers(
        [
            Informer(
                api,
                cache,
                kind=kind,
                poke=wake.set,
                errored=metrics.background_errors.labels(worker="watch").inc,
            )
            for kind in INFORMED
        ]
    )

    loop = SchedulingLoop(
        cache=cache,
        config=config,
        binder=binder,
        patcher=patcher,
        recorder=recorder,
        wake=wake,
        sync=sync_then_lead,
        settled=informers.settled,
        metrics=metrics,
        clock=clock,
        forecast_interval=forecast_interval,
    )
    informing = informers.start()
    scheduling = asyncio.create_task(loop.run(), name="scheduling loop")
    recording = asyncio.create_task(recorder.run(), name="event recorder")

    watches = [  # cancelled in this order: the health check first (it watches the rest)
        asyncio.create_task(
            keep_watch(api, metrics=metrics, watches=lambda: informing, on_fatal=lose),
            name="health",
        ),
        *informing,
        *_configmap_watches(
            api, cache, loop=loop, metrics=metrics, topology_namespace=topology_namespace
        ),
        asyncio.create_task(measure_lag(metrics), name="event loop lag"),
        asyncio.create_task(measure_fragmentation(cache, metrics), name="fragmentation"),
        asyncio.create_task(
            QueueKeeper(api, cache, metrics=metrics, leading=leadership.held).run(),
            name="queues",
        ),
    ]

    async def shutdown() -> None:
        """Everything of ours stopped in order: the passes and the watches first, then the
        writes in flight (a gang waiting for its volumes is let go: its watches are gone,
        and what it asked for is taken back), the Lease handed back, the Events posted."""
        stop.set()
        for task in (scheduling, *watches):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        patcher.close()
        binder.stop_waiting()
        await loop.drain()
        await leadership.close()
        await recorder.flush()
        recording.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recording

    frame = Frame(
        credentials=credentials,
        runtime=Runtime(
            health=Health(api, unreachable_limit=unreachable_limit),
            scheduling=asyncio.get_running_loop(),
        ),
        liveness_endpoint=liveness_endpoint,
        errored=metrics.background_errors.labels(worker="frame").inc,
    )
    try:
        await _quiet_after_first_pass(loop, busy=lambda: binder.in_flight > 0, stop=stop)
        if not stop.is_set():  # stopped already: no frame to start
            frame.start()
            await stop.wait()
    finally:
        await shutdown()
        await frame.stop()
        await api.close()
    if lost:
        raise lost[0]
