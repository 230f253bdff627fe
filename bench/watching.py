"""List, then watch: the one way the bench follows a collection on the API server.

Every driver and checker of the bench (the backlog's binds, the simulator check, chaos's
observer, the soak) follows pods this way. The API server may end a watch at any time (its
timeout, a restart, a dropped connection): the watch is then resumed from the last
resourceVersion seen, so no state is replayed or skipped; on 410 Gone, or after a few
failures in a row, the collection is listed again and the follower reconciles with the
whole list (what is missing from it went away unseen). Without that, a watch that ended
silently left a run waiting out its whole timeout for changes it could no longer see.

Not the product's informer on purpose: the bench checks what the scheduler does, and a
checker that shares the scheduler's watch code would share its blind spots.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.invariants import Invariants, requests_of
from bench.report import log
from scheduler.shell.api import ApiClient, ApiError, load_credentials

# A watch that failed this many times in a row (the API server away, say) is given up for a
# list: its resourceVersion may be compacted by the time the server is back.
FAILURES_BEFORE_LIST = 3
RETRY_SECONDS = 0.5


@dataclass
class Following:
    """Follows the collection at ``path`` (``/api/v1/namespaces/NS/pods``): ``listed`` gets
    the items of each LIST (the first and every re-list), ``changed`` each ADDED, MODIFIED or
    DELETED event as ``(type, object)``. ``ready`` is set once the first LIST is in."""

    api: ApiClient
    path: str
    listed: Callable[[list[dict]], None]
    changed: Callable[[str, dict], None]
    log: Callable[[str], None] = lambda _: None
    # Asked of the server for each watch: it ends the watch then, and it is resumed. None:
    # the server's own (30-60 minutes); a checker that must see an API server restart soon
    # asks for less.
    timeout_seconds: int | None = None
    version: str = ""  # the last resourceVersion seen
    resumed: int = 0
    relisted: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        """Until cancelled. Raises only what the callbacks raise, or a first LIST that
        failed (a run that cannot see its pods should stop and say why)."""
        await self._list(retries=5)
        self.ready.set()
        failures = 0
        while True:
            try:
                await self._watch()
                failures = 0
                self.resumed += 1
                self.log(f"watch of {self.path} ended by the server; resuming from {self.version}")
            except ApiError as error:
                if error.status == 410 or failures >= FAILURES_BEFORE_LIST:
                    self.relisted += 1
                    self.log(f"watch of {self.path}: {error}; listing again")
                    try:
                        await self._list(retries=0)
                        failures = 0
                        continue
                    except ApiError as failed:
                        error = failed
                failures += 1
                self.resumed += 1
                self.log(f"watch of {self.path} failed ({error}); resuming from {self.version}")
                await asyncio.sleep(RETRY_SECONDS)

    async def _list(self, *, retries: int) -> None:
        answer = await self.api.request("GET", self.path, retries=retries)
        self.listed(answer.get("items") or [])
        self.version = answer["metadata"]["resourceVersion"]

    async def _watch(self) -> None:
        """Advances ``version`` with every event, so that a watch cut short resumes where it
        stopped, never replaying older states."""
        query = f"watch=1&allowWatchBookmarks=true&resourceVersion={self.version}"
        if self.timeout_seconds is not None:
            query += f"&timeoutSeconds={self.timeout_seconds}"
        async for event in self.api.stream(f"{self.path}?{query}"):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise ApiError(int(obj.get("code") or 0), "watch", str(obj.get("message")))
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.changed(kind, obj)
            self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version


async def follow_through_restarts(
    *,
    kubeconfig: Path | str,
    path: str,
    listed: Callable[[list[dict]], None],
    changed: Callable[[str, dict], None],
    stop: asyncio.Event,
    user_agent: str,
) -> None:
    """``Following`` for checkers that watch while the API server is restarted under them:
    begun again whenever its first LIST fails (the API server away), with short watches
    that see a restart soon, until ``stop`` is set or it is cancelled. A bug of the
    checker's is printed, never silent, and the following goes on."""
    api = ApiClient(load_credentials(str(kubeconfig)), user_agent=user_agent)
    try:
        while not stop.is_set():
            following = Following(api, path, listed=listed, changed=changed, timeout_seconds=30)
            try:
                await following.run()
            except ApiError:  # the first list failed: the API server is away
                await asyncio.sleep(0.3)
            except Exception:
                traceback.print_exc()
                await asyncio.sleep(0.5)
    except asyncio.CancelledError:
        pass
    finally:
        await api.close()


async def until_listed(
    listed: asyncio.Event, task: asyncio.Task | None, *, timeout: float, what: str
) -> None:
    """Wait for a follower's first LIST (``listed`` set) while its ``task`` runs: the error
    that ended the task if it ended, TimeoutError naming ``what`` if the LIST did not come."""
    assert task is not None, "start() first"
    waiting = asyncio.ensure_future(listed.wait())
    try:
        await asyncio.wait({waiting, task}, timeout=timeout, return_when="FIRST_COMPLETED")
    finally:
        waiting.cancel()
    if task.done():
        task.result()  # raises what ended it
    if not listed.is_set():
        raise TimeoutError(f"{what} not listed in {timeout:g}s")


def one_by_one(seen: Callable[[dict], None]) -> Callable[[list[dict]], None]:
    """A ``listed`` for followers that take a listed item as they take an added one."""

    def listed(items: list[dict]) -> None:
        for item in items:
            seen(item)

    return listed


@dataclass
class BindWatch:
    """Records, from a list and then a watch of the namespace's pods (``watching``), when
    each pod was first seen bound."""

    api: ApiClient
    namespace: str
    # Checked with every pod seen bound or deleted (partial gangs, overcommitted nodes).
    invariants: Invariants | None = None
    bound_at: dict[str, float] = field(default_factory=dict)
    task: asyncio.Task | None = None
    following: Following = field(init=False)

    def __post_init__(self) -> None:
        self.following = Following(
            self.api,
            f"/api/v1/namespaces/{self.namespace}/pods",
            listed=one_by_one(self._record),
            changed=self._changed,
            log=log,
        )

    @property
    def listed(self) -> asyncio.Event:
        """Set once the first LIST is in: a backlog starts the scheduler only then, so that
        the bench's own LIST of thousands of pods does not share the API server and the
        cores with the scheduler's start (it had tripled our time from process start to
        first log line)."""
        return self.following.ready

    def _record(self, pod: dict) -> None:
        name = pod.get("metadata", {}).get("name")
        node = pod.get("spec", {}).get("nodeName")
        if name and node and name not in self.bound_at:
            self.bound_at[name] = now = time.monotonic()
            if self.invariants is not None:
                self.invariants.bound(name, node=node, requests=requests_of(pod), at=now)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._forget(pod)  # a finished pod holds no room, as every scheduler counts it

    def _forget(self, pod: dict) -> None:
        name = pod.get("metadata", {}).get("name")
        if name and self.invariants is not None:
            self.invariants.deleted(name)

    def _changed(self, kind: str, pod: dict) -> None:
        if kind == "DELETED":
            self._forget(pod)
        else:
            self._record(pod)

    @property
    def resumed(self) -> int:
        return self.following.resumed

    @property
    def relisted(self) -> int:
        return self.following.relisted

    def start(self) -> BindWatch:
        self.task = asyncio.get_running_loop().create_task(self.following.run())
        return self

    async def until_listed(self, *, timeout: float) -> BindWatch:
        """Wait for the first LIST (a failed one raises its error)."""
        what = f"the pods of {self.namespace}"
        await until_listed(self.listed, self.task, timeout=timeout, what=what)
        return self

    async def wait_until(self, done: Callable[[], bool], *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if self.task is not None and self.task.done():
                self.task.result()  # the watch died: say why, rather than time out
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: only {len(self.bound_at)} pods bound in {timeout}s")
            await asyncio.sleep(0.05)

    async def wait_for(self, count: int, *, timeout: float) -> None:
        await self.wait_until(
            lambda: len(self.bound_at) >= count, timeout=timeout, what=f"waiting for {count} binds"
        )

    def span(self) -> tuple[float, float]:
        """When the first and the last bind were seen."""
        return min(self.bound_at.values()), max(self.bound_at.values())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
