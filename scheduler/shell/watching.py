"""Our own LIST-then-WATCH loops: the informers of the busy kinds, and a label-selected watch
for the few ConfigMaps of seed 004.

``Informer`` keeps each watched kind in the cache as client-go's reflector does:
one LIST (paged), then a WATCH from its resourceVersion, resumed from the last version seen
when the stream ends or breaks, and a new LIST only when the server says that version is
gone (410). kopf did this for us, but spent more per event than the rest of the scheduler:
a third of the process's time at 1,000 nodes (its per-object handler machinery and
bookkeeping for features we do not use), and about 0.4 ms per listed object before the
first pass; and it resolved its kinds once, so a scheduler started while the API server
restarted could miss a kind for good. kopf runs the operator's frame.

``LabelWatch``: kopf watches a whole kind and filters in the process; for ConfigMaps that is
every one in the cluster, for the handful we want. Here the API server filters: an object that stops
matching (its label removed) arrives as DELETED, as it does for any selector watch. Any end
of the stream (a timeout, 410 Gone, a dropped connection) starts over with a fresh LIST,
which also reports as deleted whatever vanished in between; with a selector that LIST is
small.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.model.pods import PodGroupApi
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.syncing import LISTS, UPSERTS, fold_listing, key_of, list_versioned, remove

log = structlog.get_logger()


class _Expired(Exception):
    """The watch cannot go on from its resourceVersion (410 Gone, or a watch that failed
    again and again there): only a new LIST can."""


class _Interrupted(Exception):
    """A re-list was asked for while the watch ran."""


class Informer:
    """One kind, listed and then watched into the cache, for as long as it runs.

    Never ends by itself: every failure (no answer, 5xx, 429, a payload cut short, a bug
    in a codec) is logged, counted when it is ours, and followed by a resumed watch after
    a backoff; the API server being away is what /healthz reports. A watch that fails
    ``relist_after`` times in a row from one version, or gets 4xx, starts over with a
    LIST (client-go's reflector does too: a version "too large" after an etcd restore
    never works). A stream that stays silent past its own timeout (a connection that died
    without a word) is given up and resumed.

    A PodGroup kind the server does not serve counts as listed (empty) and is listed
    again every ``absent_seconds``, so a CRD installed later is picked up. One that was
    served and then answers 404 is dropped from the cache only once it stays away that
    long: a restarting API server answers 404 for custom resources for a moment.

    ``relist`` asks for a fresh LIST (a new leader, the API server back after an outage,
    the backstop); the same task does it, so no two LISTs of a kind ever overlap.
    """

    def __init__(
        self,
        api: ApiClient,
        cache: ClusterCache,
        *,
        kind: str,
        poke: Callable[[], None],
        errored: Callable[[], None] = lambda: None,
        retry_seconds: float = 0.5,
        max_retry_seconds: float = 5.0,
        timeout_seconds: int = 300,
        absent_seconds: float = 30.0,
        relist_after: int = 3,
        grace_seconds: float = 30.0,
    ) -> None:
        self.kind = kind
        self._grace_seconds = grace_seconds
        self.listed = asyncio.Event()  # the first LIST is in the cache
        self._api = api
        self._cache = cache
        self._poke = poke
        self._errored = errored
        self._retry_seconds = retry_seconds
        self._max_retry_seconds = max_retry_seconds
        self._timeout_seconds = timeout_seconds
        self._absent_seconds = absent_seconds
        self._relist_after = relist_after
        self._upsert = UPSERTS[kind]
        self._version: str | None = None  # where the watch takes up; None: LIST first
        self._served = True
        self._absent_since: float | None = None
        self._asked = 0  # how many re-lists were asked for
        self._answers: list[tuple[int, asyncio.Future[None]]] = []
        self._nudge = asyncio.Event()
        self._watching: asyncio.Task[None] | None = None
        self.lists = 0  # how many LISTs it took (1 unless a version expired)

    def relist(self) -> asyncio.Future[None]:
        """Ask for a LIST begun after now; done once it is in the cache."""
        self._asked += 1
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._answers.append((self._asked, answer))
        self._version = None
        self._nudge.set()
        if self._watching is not None:
            self._watching.cancel()
        return answer

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            for _, answer in self._answers:
                answer.cancel()

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                if self._version is None:
                    await self._list()
                    failures = 0
                    if self._version is None:  # not served: look again later
                        await self._pause(self._absent_seconds)
                        continue
                began = time.monotonic()
                await self._watch_once()
                if time.monotonic() - began < 1:  # ended at once: do not spin on it
                    await self._pause(self._retry_seconds)
                failures = 0  # the stream ended as streams do (timeoutSeconds): resume
            except _Interrupted:
                continue
            except _Expired:
                log.info("watch expired; listing again", kind=self.kind)
                self._version = None
            except Exception as error:  # ApiError, or a bug: the watch must go on either way
                failures += 1
                if isinstance(error, ApiError):
                    log.warning("watch failed", kind=self.kind, error=str(error))
                    if 400 <= error.status < 500 and error.status != 429:
                        self._version = None  # 404, 410, a version it refuses: LIST
                else:
                    self._errored()
                    log.exception("watch failed", kind=self.kind)
                if failures >= self._relist_after:
                    self._version = None
                delay = self._retry_seconds * 2 ** min(failures - 1, 10)
                await self._pause(min(delay, self._max_retry_seconds))

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless a re-list is asked for meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._nudge.wait()

    async def _list(self) -> None:
        self._nudge.clear()
        asked = self._asked
        since = self._cache.delivered
        items, version = await list_versioned(self._api, self.kind)
        if version is None:
            if not self._gone_for_good():
                raise ApiError(404, "NotFound", "not served just now; looking again")
        else:
            if not self._served:
                log.info("kind now served; watching it", kind=self.kind)
            self._served, self._absent_since = True, None
        fold_listing(self._cache, self.kind, items, since=since)
        self.lists += 1
        # A re-list asked for while this one ran wants one begun after it: another LIST.
        self._version = version if self._asked == asked else None
        if version == "":
            log.warning("LIST without a resourceVersion; watching from now", kind=self.kind)
        for target, answer in self._answers:
            if target <= asked and not answer.done():
                answer.set_result(None)
        self._answers = [(target, a) for target, a in self._answers if target > asked]
        self.listed.set()
        self._poke()

    def _gone_for_good(self) -> bool:
        """A kind the server does not serve: at the first LIST, or ``absent_seconds``
        after it stopped (then it is dropped from the cache)."""
        if not self.listed.is_set():
            first = True
        else:
            now = time.monotonic()
            if self._absent_since is None:
                self._absent_since = now
            first = False
            if self._served and now - self._absent_since < self._absent_seconds:
                return False
        if self._served and self.kind == PodGroupApi.OURS.kind:
            log.warning("the PodGroup CRD is not installed; kubectl apply -f crds/", first=first)
        elif self._served:  # the others are optional: their gangs' PodGroupNotFound says so
            log.info("kind not served; looking again later", kind=self.kind, first=first)
        self._served = False
        return True

    async def _watch_once(self) -> None:
        """One watch stream, in a task of its own so that ``relist`` can cut it short, and
        given up once it outlives its own timeout (the server ends it before)."""
        self._watching = asyncio.create_task(self._watch())
        try:
            async with asyncio.timeout(self._timeout_seconds + self._grace_seconds):
                await asyncio.shield(self._watching)
        except TimeoutError:
            self._watching.cancel()
            log.warning("watch silent past its timeout; resuming", kind=self.kind)
        except asyncio.CancelledError:
            if self._watching.cancelled() and not _cancelling():
                raise _Interrupted from None
            self._watching.cancel()
            raise
        finally:
            self._watching = None

    async def _watch(self) -> None:
        query = "&" if "?" in LISTS[self.kind] else "?"
        query += (
            f"watch=1&allowWatchBookmarks=true&resourceVersion={self._version}"
            f"&timeoutSeconds={self._timeout_seconds}"
        )
        async for event in self._api.stream(LISTS[self.kind] + query):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":  # a Status: 410 Gone, or the watch broke on the server
                if obj.get("code") == 410:
                    raise _Expired
                raise ApiError(
                    obj.get("code") or 0, str(obj.get("reason")), str(obj.get("message"))
                )
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
                self._poke()
            if version:  # a BOOKMARK too: where to resume, with nothing to apply
                self._version = str(version)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        """A malformed object must never end the watch: it is logged and ignored."""
        try:
            if kind == "DELETED":
                remove(self._cache, self.kind, key_of(self.kind, obj))
            else:
                self._upsert(self._cache, obj)
        except Exception:
            log.exception("could not read object; it is ignored", kind=self.kind)


class Informers:
    """The informers of every watched kind, run and asked to re-list together."""

    def __init__(self, informers: list[Informer]) -> None:
        self.all = {informer.kind: informer for informer in informers}
        self._pending: list[asyncio.Future[None]] = []

    @property
    def listed(self) -> dict[str, asyncio.Event]:
        """Per kind, set once its first LIST is in the cache."""
        return {kind: informer.listed for kind, informer in self.all.items()}

    def start(self) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(informer.run(), name=f"informer {kind}")
            for kind, informer in self.all.items()
        ]

    def everything(self) -> None:
        """A fresh LIST of every kind, which ``settled`` waits for: this replica just
        became leader (its watches may lag behind the old leader's last binds), or the API
        server answers again after an outage (a watch may have missed deletions it can no
        longer replay)."""
        self._pending = [f for f in self._pending if not f.done()]
        self._pending += [informer.relist() for informer in self.all.values()]

    async def settled(self) -> None:
        """Wait until every re-list asked for is in the cache: a pass on a cache that may
        still hold deleted nodes or pods would place members on nodes that are gone."""
        while pending := [f for f in self._pending if not f.done()]:
            await asyncio.wait(pending)


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not one it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


OnEvent = Callable[[str, dict[str, Any]], None]  # ("ADDED"|"MODIFIED"|"DELETED", object)


class LabelWatch:
    def __init__(
        self,
        api: ApiClient,
        *,
        path: str,
        selector: str,
        on_event: OnEvent,
        retry_seconds: float = 2.0,
        timeout_seconds: int = 300,
        errored: Callable[[], None] = lambda: None,
    ) -> None:
        self._errored = errored
        self._api = api
        self._path = path
        self._selector = quote(selector)
        self._on_event = on_event
        self._retry_seconds = retry_seconds
        self._timeout_seconds = timeout_seconds
        self._known: dict[str, dict[str, Any]] = {}  # uid -> last object seen

    async def run(self) -> None:
        while True:
            try:
                version = await self._list()
                await self._watch(version)
            except Exception as error:  # ApiError, or a bug: the watch must go on either way
                if not isinstance(error, ApiError):
                    self._errored()
                log.warning(
                    "watch ended; listing again",
                    path=self._path,
                    selector=self._selector,
                    error=str(error),
                )
                await asyncio.sleep(self._retry_seconds)

    async def _list(self) -> str:
        listing = await self._api.request("GET", f"{self._path}?labelSelector={self._selector}")
        items = {item["metadata"]["uid"]: item for item in listing.get("items") or ()}
        for uid, gone in list(self._known.items()):
            if uid not in items:
                self._emit("DELETED", gone)
        for item in items.values():
            self._emit("ADDED", item)
        return str((listing.get("metadata") or {}).get("resourceVersion", ""))

    async def _watch(self, version: str) -> None:
        query = (
            f"?labelSelector={self._selector}&watch=1&allowWatchBookmarks=true"
            f"&resourceVersion={version}&timeoutSeconds={self._timeout_seconds}"
        )
        async for event in self._api.stream(self._path + query):
            kind = event.get("type", "")
            obj = event.get("object") or {}
            if kind == "ERROR":  # 410 Gone and the like: the LIST starts over
                log.info("watch expired; listing again", path=self._path, reason=obj.get("reason"))
                return
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._emit(kind, obj)

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if kind == "DELETED":
            self._known.pop(uid, None)
        else:
            self._known[uid] = obj
        try:
            self._on_event(kind, obj)
        except Exception:  # a malformed object must not end the watch
            log.exception("could not read object; it is ignored", path=self._path, uid=uid)
