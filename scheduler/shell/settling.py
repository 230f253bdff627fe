"""One poller for every writer that waits behind the binds.

``busy`` is a plain callable (the binder's count of binds in flight), so a wait for it is a
poll. Each writer polling on its own was hundreds of wake-ups of the event loop per tick
while a burst of binds keeps it busy already (statuses: one per gang; Events: one per worker),
so the writers share one poller: the first to wait starts it, the rest wait on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Settling:
    """Waits while ``holding()`` is true, polled every ``interval`` seconds by one task for
    every waiter; a wait ends after ``limit`` seconds from the poller's start even if it
    still holds."""

    def __init__(
        self, holding: Callable[[], bool], *, interval: float = 0.05, limit: float = float("inf")
    ) -> None:
        self._holding = holding
        self._interval = interval
        self._limit = limit
        self._poller: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        if not self._holding():
            return
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll())
        await asyncio.shield(self._poller)

    async def _poll(self) -> None:
        until = time.monotonic() + self._limit
        while self._holding() and time.monotonic() < until:
            await asyncio.sleep(self._interval)
