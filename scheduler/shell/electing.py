"""Leader election on a coordination.k8s.io Lease, so that of two replicas one schedules.

The same protocol as client-go's leaderelection: the holder renews the Lease every few
seconds; a candidate takes it over once it has seen the same record, unchanged, for longer
than the lease duration. Expiry is judged by *our* clock since *we* last saw the record
change, never by comparing our clock with the holder's, so clock skew cannot hand out two
leases.

Fencing: the leader counts its lease from the moment it *sent* the renewal that succeeded
(the standby cannot have seen that record earlier), and considers itself leader only until
that moment plus the lease duration minus a margin. ``held()`` says so, and the binder asks
it right before every bind. The renew deadline is a timer, not a check after a failure: a
renewal that hangs is cut off at the deadline, and leadership is lost then. A replica frozen
(SIGSTOP, a long GC, a paused VM) past its deadline finds ``held()`` false the moment it
runs again, before it can send anything.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()


class LostLeadership(Exception):
    """The lease could not be renewed in time: another replica may be leader now."""


def _micro_time(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElector:
    api: ApiClient
    namespace: str
    name: str
    identity: str
    lease_seconds: float = 15.0
    renew_seconds: float = 5.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        self._observed: tuple[str, float] | None = None  # (resourceVersion, when we saw it)
        self._renewed_at = 0.0

    @property
    def _path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def _spec(self, *, transitions: int, acquired: str | None = None) -> dict:
        now = _micro_time(time.time())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try(self) -> float | None:
        """One attempt to acquire or renew: the moment the write that took or renewed the
        lease was sent (the lease counts from there: no rival can see it earlier, and a
        slow read before it must not eat the lease), or None if another holds it."""
        try:
            lease = await self.api.request("GET", self._path)
        except ApiError as error:
            if error.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(transitions=0),
            }
            path = self._path.rsplit("/", 1)[0]
            sent = time.monotonic()
            try:
                await self.api.post(path, body)
            except ApiError as create_error:
                if create_error.status == 409:  # another replica created it first
                    return None
                raise
            return sent
        spec = lease.get("spec") or {}
        version = lease["metadata"]["resourceVersion"]
        now = time.monotonic()
        if self._observed is None or self._observed[0] != version:
            self._observed = (version, now)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        ours = holder == self.identity
        expired = now - self._observed[1] > duration
        if not (ours or expired or not holder):
            return None
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)
        lease["spec"] = self._spec(
            transitions=transitions, acquired=spec.get("acquireTime") if ours else None
        )
        sent = time.monotonic()
        try:
            await self.api.request("PUT", self._path, body=lease)
        except ApiError as error:
            if error.status == 409:  # someone else wrote it since we read it
                return None
            raise
        return sent

    def held(self) -> bool:
        """Whether we may act as leader now: before the renew deadline of our lease."""
        return time.monotonic() < self._deadline()

    def remaining(self) -> float:
        """Seconds until the renew deadline of our lease (0 once past it)."""
        return max(self._deadline() - time.monotonic(), 0.0)

    def _deadline(self) -> float:
        return self._renewed_at + self.lease_seconds - self.retry_seconds

    def _until_deadline(self, at_most: float) -> float:
        return max(min(at_most, self._deadline() - time.monotonic()), 0.0)

    async def acquire(self) -> None:
        """Wait until we are leader."""
        log.info("waiting to become leader", lease=f"{self.namespace}/{self.name}")
        while True:
            try:
                async with asyncio.timeout(self.lease_seconds):
                    if (sent := await self._try()) is not None:
                        self._renewed_at = sent
                        log.info("became leader", lease=f"{self.namespace}/{self.name}")
                        return
            except Exception as error:  # ApiError, a timeout, or a malformed Lease
                log.warning("leader election attempt failed", error=str(error))
            await asyncio.sleep(self.retry_seconds)

    async def release(self) -> None:
        """On a clean shutdown: hand the lease back, so a standby need not wait it out."""
        try:
            async with asyncio.timeout(self.retry_seconds * 2):
                lease = await self.api.request("GET", self._path)
                if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                lease["spec"]["holderIdentity"] = ""
                await self.api.request("PUT", self._path, body=lease)
            log.info("released the lease", lease=f"{self.namespace}/{self.name}")
        except Exception as error:
            log.warning("could not release the lease", error=str(error))

    async def keep(self) -> None:
        """Renew until we cannot; then raise LostLeadership. Every attempt is cut off at
        the renew deadline, so the loss is noticed on time even if a request hangs."""
        while True:
            # Half the time left at most: a lease acquired by a slow request (an API server
            # waiting on etcd) has little of it left, and sleeping to its deadline would end
            # it unrenewed before the new leader's first pass.
            await asyncio.sleep(
                max(min(self.renew_seconds, (self._deadline() - time.monotonic()) / 2), 0)
            )
            while True:
                remaining = self._deadline() - time.monotonic()
                if remaining <= 0:
                    raise LostLeadership(
                        f"lease {self.namespace}/{self.name} not renewed by its deadline"
                    )
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self._try()
                except TimeoutError:
                    continue  # the deadline passed: said above
                except Exception as error:  # ApiError or a malformed Lease: try again
                    log.warning("lease renewal failed", error=str(error))
                    await asyncio.sleep(self._until_deadline(self.retry_seconds))
                    continue
                if renewed is None:
                    raise LostLeadership(f"lease {self.namespace}/{self.name} is held by another")
                self._renewed_at = renewed
                break


class Leadership:
    """Holds the lease around the scheduling loop: acquire before the first pass, renew in
    the background, call ``on_lost`` if renewal fails, release on a clean shutdown."""

    def __init__(
        self, elector: LeaderElector | None, *, on_lost: Callable[[BaseException], None]
    ) -> None:
        self._elector = elector
        self._on_lost = on_lost
        self._keeper: asyncio.Task[None] | None = None
        self.lost = False

    async def acquire(self) -> None:
        if self._elector is None or self._keeper is not None:
            return
        await self._elector.acquire()
        self._keeper = asyncio.create_task(self._elector.keep(), name="lease keeper")
        self._keeper.add_done_callback(self._done)

    def held(self) -> bool:
        """Whether this replica may bind now (always, without leader election)."""
        if self._elector is None:
            return True
        return self._keeper is not None and not self.lost and self._elector.held()

    def remaining(self) -> float:
        """How long this replica may still act as leader (for ever without election): a
        write sent now must land within it, or not at all."""
        if self._elector is None:
            return math.inf
        return self._elector.remaining() if self.held() else 0.0

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.lost = True
            self._on_lost(task.exception())  # type: ignore[arg-type]

    async def close(self) -> None:
        if self._keeper is None:
            return
        keeper, self._keeper = self._keeper, None
        keeper.remove_done_callback(self._done)
        keeper.cancel()
        if not self.lost and self._elector is not None:
            await self._elector.release()
