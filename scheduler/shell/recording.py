"""Events, posted in the background: best effort, never in the way of binding.

Events queue up and a few workers post them; binding has the connection pool and the API
server to itself first. A burst larger than the backlog drops events (and counts them)
rather than slowing the scheduler down; a status condition says the same thing anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Callable

import structlog

from scheduler.model.decisions import Event, ObjectRef
from scheduler.model.times import format_time
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.settling import Settling

log = structlog.get_logger()

_API_VERSIONS = {"Pod": "v1", "PodGroup": "scheduling.x-k8s.io/v1alpha1"}


def _home(ref: ObjectRef) -> str:
    """Where an Event about ``ref`` lives: its namespace; "default" for a cluster-scoped
    object (a Queue), as kubectl and the API server's own recorders put them."""
    return ref.namespace or "default"


class EventRecorder:
    def __init__(
        self,
        api: ApiClient,
        *,
        component: str,
        workers: int = 4,
        beside_binds: int = 0,
        backlog: int = 50_000,
        high_water: int = 8_000,
        busy: Callable[[], bool] = lambda: False,
        dropped: Callable[[], None] = lambda: None,
        errored: Callable[[], None] = lambda: None,
        retries: int = 3,
        component_of: Callable[[ObjectRef], str | None] = lambda ref: None,
    ) -> None:
        self._on_drop = dropped
        # The scheduler name a pod asked for, when it is one of our aliases: its Events come
        # from that component, as kube-scheduler's profiles each report under their own name.
        self._component_of = component_of
        self._on_error = errored
        self._retries = retries
        # ``busy`` says binds are in flight: events wait, so that a burst of binds has the
        # API server to itself; they are posted as soon as it is over, or while more than
        # ``high_water`` wait: under a steady stream of binds (busy nearly always) the backlog
        # filled and 12,000 of 30,000 Events were dropped (make bench-curve, 5,000 nodes).
        # Posted beside the binds they still come slower than the binds make them (the API
        # server is shared with the binds and the kubelets' status writes): 6,645 of 30,000
        # were dropped with a backlog of 10,000. The backlog holds five times
        # the high water (about 0.5 KB an Event: 25 MB full), so a burst that size lands late
        # rather than not at all; what waits past the high water does not wait for binds.
        self._high_water = min(high_water, int(backlog * 0.8))
        self._binds_settled = Settling(lambda: busy() and self._pending < self._high_water)
        self._api = api
        self._component = component
        self._instance = socket.gethostname()
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=backlog)
        self._workers = workers
        # Workers that post while binds are in flight too (the rest wait for them): a trickle,
        # so that a backlog's Events are not all left until its last bind.
        self._beside_binds = min(beside_binds, workers)
        self.posted = 0
        self.dropped = 0
        self._pending = 0  # queued or being posted

    @property
    def pending(self) -> int:
        """Events queued or being posted: PodGroup statuses wait for them (``Patcher``)."""
        return self._pending

    def body(self, event: Event, *, now: float) -> dict:
        ref = event.regarding
        stamp = format_time(now)
        component = self._component_of(ref) or self._component
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": _home(ref)},
            "involvedObject": {
                "apiVersion": ref.api_version or _API_VERSIONS.get(ref.kind, "v1"),
                "kind": ref.kind,
                "namespace": ref.namespace,
                "name": ref.name,
                "uid": ref.uid,
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": event.type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    def emit(self, event: Event) -> None:
        """Queue an event; never blocks."""
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            self._on_drop()
        else:
            self._pending += 1

    async def _post(self, event: Event) -> None:
        ns = _home(event.regarding)
        try:
            await self._api.post(
                f"/api/v1/namespaces/{ns}/events",
                self.body(event, now=time.time()),
                retries=self._retries,
            )
            self.posted += 1
        except ApiError as error:
            if error.status == 409:  # an earlier try landed after all: same name, posted
                self.posted += 1
                return
            log.warning("event not recorded", reason=event.reason, error=str(error))

    async def _work(self, *, waits: bool) -> None:
        """One worker, forever: no failure of one event ends it (or, through ``run``'s
        gather, the others). ``waits``: for the binds in flight."""
        while True:
            # A worker that waits does so before it takes an Event: one taken would be held
            # back from the workers that post beside the binds.
            if waits:
                await self._binds_settled.wait()
            event = await self._queue.get()
            try:
                await self._post(event)
            except Exception:
                log.exception("event not recorded", reason=event.reason)
                self._on_error()
            finally:
                self._pending -= 1
                self._queue.task_done()

    async def run(self) -> None:
        """Post queued events until cancelled."""
        workers = [
            asyncio.create_task(self._work(waits=i >= self._beside_binds))
            for i in range(self._workers)
        ]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait (a bounded while) until the queue is empty; for shutdown and tests."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)
