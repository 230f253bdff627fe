"""Whether this process is still any use: the API server answers, and the watches live.

A scheduler that is alive but cut off schedules nothing, and nobody notices. Two guards:

* A heartbeat asks the API server for its version every few seconds, so that an idle
  scheduler notices an outage too (the calls of the binder and the watches count as well).
  Once every call has failed for longer than the limit, ``/healthz`` fails and Kubernetes
  restarts the pod; the metric ``gang_scheduler_api_unreachable_seconds`` says so before.
* A watch that ended (the informers never end by design; this guards against a bug that
  ends one) cannot come back by itself: the process stops with an error (and is
  restarted), rather than schedule on a cache that no longer changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import structlog

from scheduler.shell.api import ApiClient
from scheduler.shell.metrics import Metrics

log = structlog.get_logger()


class Unhealthy(Exception):
    """The process cannot recover by itself: it exits, so that it is restarted."""


class Health:
    def __init__(self, api: ApiClient, *, unreachable_limit: float = 60.0) -> None:
        self._api = api
        self.unreachable_limit = unreachable_limit

    def problems(self) -> list[str]:
        """What makes the process unhealthy now ([] when healthy); /healthz reports it."""
        away = self._api.health.unreachable_for()
        if away > self.unreachable_limit:
            return [
                f"the API server has not answered for {away:.0f}s (limit "
                f"{self.unreachable_limit:.0f}s): check its address, the network, and the "
                "credentials"
            ]
        return []


async def keep_watch(
    api: ApiClient,
    *,
    metrics: Metrics,
    watches: Callable[[], Iterable[asyncio.Task[object]]],
    on_fatal: Callable[[BaseException], None],
    interval: float = 5.0,
) -> None:
    """The heartbeat and the watchdog, forever (see the module docstring)."""
    while True:
        try:
            async with asyncio.timeout(interval):
                await api.request("GET", "/version")
        except Exception as error:  # ApiError or the timeout: Reachability counted it
            api.health.failed()  # idempotent; a timeout cancelled the call uncounted
            log.debug("API server heartbeat failed", error=str(error))
        metrics.api_unreachable_seconds.set(api.health.unreachable_for())
        for task in watches():
            if task.done():  # cancelled too: only the shutdown may, and it stops this first
                error = "cancelled" if task.cancelled() else repr(task.exception())
                on_fatal(
                    Unhealthy(
                        f"the watch {task.get_name()!r} ended ({error}) and cannot resume; "
                        "exiting so that the process is restarted with fresh watches"
                    )
                )
                return
        await asyncio.sleep(interval)
