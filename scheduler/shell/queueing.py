"""Queues kept: the ``default`` queue made where the Queue API is served and it is
missing (Volcano's controller makes it too), and each Queue's status written back (what its
gangs hold, how many wait and run, its state) only where it changed, so that ``kubectl get
queues`` shows it. Only the leader writes. The figures come from the cache, counted every
few seconds, never in a pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.queues import queue_status_patch
from scheduler.core.queues import QueueBook, queue_statuses
from scheduler.model import holdings
from scheduler.model.queues import DEFAULT_QUEUE, QUEUE_API, QueueStatus
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.metrics import Metrics

log = structlog.get_logger()

QUEUES_PATH = f"/apis/{QUEUE_API}/queues"


class QueueKeeper:
    def __init__(
        self,
        api: ApiClient,
        cache: ClusterCache,
        *,
        metrics: Metrics,
        leading: Callable[[], bool],
        interval: float = 2.0,
    ) -> None:
        self._api, self._cache, self._metrics = api, cache, metrics
        self._leading = leading
        self._interval = interval
        self._default_made = False
        self._shown: set[tuple[str, ...]] = set()  # metric label sets set last time

    async def run(self) -> None:
        """Forever: a failure is logged and the next round tries again."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.tend()
            except ApiError as error:
                log.warning("queue status not written", error=str(error))
            except Exception:  # a bug of ours must not end the keeper
                log.exception("queue keeper failed; trying again")
                self._metrics.background_errors.labels(worker="queues").inc()

    async def tend(self) -> None:
        """One round: the default queue, then every status that changed."""
        queues = self._cache.queues
        if queues is None or not self._leading():
            return
        if DEFAULT_QUEUE not in queues and not self._default_made:
            await self._make_default()
        # Off the event loop: a walk over every pod of ours (0.2 s at 60,000 pods).
        census = await asyncio.to_thread(holdings.census, *self._cache.census_inputs())
        observed = self._cache.queue_statuses()
        statuses = queue_statuses(queues, census=census, observed=observed)
        self._measure(queues, census.held, statuses)
        for name, status in sorted(statuses.items()):
            before = observed.get(name, QueueStatus())
            if status == before:
                continue  # what the API server shows is the truth: written on change only
            try:
                await self._api.merge_patch(
                    f"{QUEUES_PATH}/{name}/status",
                    queue_status_patch(status, before=before),
                    retries=2,
                )
            except ApiError as error:
                # Gone meanwhile (404): nothing to show. Else one queue's failure must not
                # keep the others' status from being written: said, and tried next round.
                if error.status != 404:
                    log.warning("queue status not written", queue=name, error=str(error))

    async def _make_default(self) -> None:
        """Once: a default queue removed on purpose afterwards stays removed. Tried again next
        round if the API server did not answer (429, 5xx, no connection)."""
        body = {
            "apiVersion": QUEUE_API,
            "kind": "Queue",
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"weight": 1, "reclaimable": True},
        }
        try:
            await self._api.post(QUEUES_PATH, body, retries=2)
            log.info("made the default queue")
        except ApiError as error:
            if error.status not in (403, 409):
                raise
            if error.status == 403:
                log.info("may not create the default queue (RBAC); it is used as if it existed")
        self._default_made = True

    def _measure(self, queues: dict, held: dict, statuses: dict[str, QueueStatus]) -> None:
        metrics = self._metrics
        total = self._cache.allocatable_total()
        book = QueueBook(
            queues, usage={(q or DEFAULT_QUEUE): a for q, a in held.items()}, total=total
        )
        shown: set[tuple[str, ...]] = set()
        for name, status in statuses.items():
            for resource, amount in status.allocated.items():
                metrics.queue_allocated.labels(queue=name, resource=resource).set(amount)
                shown.add(("allocated", name, resource))
            for resource, amount in book.fair.get(name, {}).items():
                metrics.queue_fair_share.labels(queue=name, resource=resource).set(amount)
                shown.add(("fair", name, resource))
            known = queues.get(name)
            for resource, amount in ((known.deserved or {}) if known else {}).items():
                metrics.queue_deserved.labels(queue=name, resource=resource).set(amount)
                shown.add(("deserved", name, resource))
            for state, count in (("pending", status.pending), ("running", status.running)):
                metrics.queue_gangs.labels(queue=name, state=state).set(count)
                shown.add(("gangs", name, state))
        for gone in self._shown - shown:  # a queue deleted, a resource no longer held
            kind, name, label = gone
            gauge = {
                "allocated": metrics.queue_allocated,
                "fair": metrics.queue_fair_share,
                "deserved": metrics.queue_deserved,
                "gangs": metrics.queue_gangs,
            }[kind]
            gauge.remove(name, label)
        self._shown = shown
