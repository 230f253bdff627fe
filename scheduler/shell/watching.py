"""Our own LIST-then-WATCH loops: an informer per watched kind, and a label-selected watch
for Sakkara's few ConfigMaps.

``Informer`` keeps one kind in the cache as client-go's reflector does: one LIST (paged),
then a WATCH from its resourceVersion, resumed from the last version seen when the stream
ends or breaks, and a new LIST only when that cannot work (410 Gone, another 4xx, failures
again and again). kopf could do this for us, but spends more per event than the rest of
the scheduler: a third of the process's time at 1,000 nodes (its per-object handler
machinery and bookkeeping for features we do not use), and about 0.4 ms per listed object
before the first pass; and it resolves its kinds once, so a scheduler started while the API
server restarted could miss a kind for good. kopf runs the operator's frame.

``LabelWatch``: the API server filters by label (kopf would watch every ConfigMap in the
cluster and filter in the process): an object that stops matching (its label removed)
arrives as DELETED, as it does for any selector watch. Any end of the stream (a timeout,
410 Gone, a dropped connection) starts over with a fresh LIST, which also reports as
deleted whatever vanished in between; with a selector that LIST is small.
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
from scheduler.model.owners import OwnerKind
from scheduler.model.pods import PodGroupApi
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.kinds import WATCHED
from scheduler.shell.syncing import Folding, list_pages, listed_path

log = structlog.get_logger()

OWNER_KINDS = frozenset(kind.kind for kind in OwnerKind)

# Listed objects folded into the cache between two looks at the event loop: about 7 ms of
# pods (their codec is ~35 us each).
FOLD_SLICE = 200


class _Expired(Exception):
    """The watch cannot go on from its resourceVersion (410 Gone): only a new LIST can."""


class _Interrupted(Exception):
    """A re-list was asked for while the watch ran."""


class Informer:
    """One kind, listed and then watched into the cache, for as long as it runs.

    Never ends by itself: every failure (no answer, 5xx, 429, a payload cut short, a bug
    in a codec) is logged, counted when it is ours, and followed by a resumed watch after
    a backoff; the API server being away is what /healthz reports. The watch starts over
    with a LIST on 410, on another 4xx, or after ``relist_after`` failures in a row with no
    event between them (client-go's reflector does too: a version "too large" after an
    etcd restore never works). A stream that stays silent past its own timeout plus
    ``grace_seconds`` (a connection that died without a word) is given up and resumed.

    A PodGroup kind the server does not serve counts as listed (empty) and is listed again
    after 1 s, then less and less often, down to every ``absent_seconds``: a CRD installed
    later is picked up, and one that answered 404 at start only because the API server was
    starting too is picked up within seconds. One that was served and then answers 404 is
    dropped from the cache only once it has been away ``absent_seconds``: a restarting API
    server answers 404 for custom resources for a moment.

    ``relist`` asks for a fresh LIST (a new leader: its watches may lag behind the old
    leader's last binds); the informer's own task does it, so no two LISTs of a kind ever
    overlap.
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
        grace_seconds: float = 30.0,
        absent_seconds: float = 30.0,
        relist_after: int = 3,
    ) -> None:
        self.kind = kind
        self.listed = asyncio.Event()  # the first LIST is in the cache
        self.last_error = ""  # what the last failure was, for a message that names it
        self._api = api
        self._cache = cache
        self._poke = poke
        self._errored = errored
        self._retry_seconds = retry_seconds
        self._max_retry_seconds = max_retry_seconds
        self._timeout_seconds = timeout_seconds
        self._grace_seconds = grace_seconds
        self._absent_seconds = absent_seconds
        self._relist_after = relist_after
        self._watched = WATCHED[kind]
        self._path = self._watched.path  # at the version served, found before each LIST
        self._version: str | None = None  # where the watch takes up; None: LIST first
        self._failures = 0  # in a row, with no watch event between them (a LIST is none)
        self._served = True
        self._absent_since: float | None = None
        self._absent_pause = 1.0
        self._asked = 0  # how many re-lists were asked for
        self._answers: list[tuple[int, asyncio.Future[None]]] = []
        self._nudge = asyncio.Event()
        self._watching: asyncio.Task[None] | None = None

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
        while True:
            try:
                if self._version is None:
                    await self._list()
                    if self._version is None:  # not served, or asked again meanwhile
                        await self._pause(self._absent_pause if not self._served else 0)
                        continue
                began = time.monotonic()
                await self._watch_once()
                if time.monotonic() - began < 1:  # ended at once: do not spin on it
                    await self._pause(self._retry_seconds)
            except _Interrupted:
                continue
            except _Expired:
                # The first 410 lists at once; one with no event since waits (no spinning).
                log.info("watch expired; listing again", kind=self.kind)
                self._version = None
                await self._pause(self._backoff() if self._failures else 0)
                self._failures += 1
            except Exception as error:  # ApiError, or a bug: the watch must go on either way
                self._failures += 1
                self.last_error = str(error)
                doing = "list" if self._version is None else "watch"
                if isinstance(error, ApiError):
                    log.warning(f"{doing} failed", kind=self.kind, error=str(error))
                    if 400 <= error.status < 500 and error.status != 429:
                        self._version = None  # 404, 410, a version it refuses: LIST
                else:
                    self._errored()
                    log.exception(f"{doing} failed", kind=self.kind)
                if self._failures >= self._relist_after:
                    self._version = None
                await self._pause(self._backoff())

    def _backoff(self) -> float:
        delay = self._retry_seconds * 2 ** min(max(self._failures - 1, 0), 10)
        return min(delay, self._max_retry_seconds)

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless a re-list is asked for meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._nudge.wait()

    async def _list(self) -> None:
        self._nudge.clear()
        asked = self._asked
        folding = Folding(self._cache, self.kind, since=self._cache.listing(self.kind))

        async def fold(items: list[dict[str, Any]]) -> None:
            # In slices, handing the loop back between them: the next page's request goes
            # out meanwhile, and the watches and binds go on.
            for start in range(0, len(items), FOLD_SLICE):
                folding.page(items[start : start + FOLD_SLICE])
                await asyncio.sleep(0)

        try:
            self._path = await listed_path(self._api, self.kind)
            version = await list_pages(self._api, self.kind, each=fold, path=self._path)
            if version is None:
                if not self._gone_for_good():
                    raise ApiError(404, "NotFound", "not served just now; looking again")
            else:
                if not self._served:
                    log.info("kind now served; watching it", kind=self.kind)
                self._served, self._absent_since, self._absent_pause = True, None, 1.0
            folding.finish()
        finally:
            folding.close()  # a LIST that failed keeps no stamps either
        self._cache.serve(self.kind, self._served)
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
        """Whether a kind that answers 404 counts as not served (and empty): at once at the
        first LIST, else once it has been away ``absent_seconds``."""
        if not self._served:
            self._absent_pause = min(self._absent_pause * 2, self._absent_seconds)
            return True
        if self.listed.is_set():
            now = time.monotonic()
            if self._absent_since is None:
                self._absent_since = now
            if now - self._absent_since < self._absent_seconds:
                return False
        if self.kind == PodGroupApi.OURS.kind:
            log.warning("the PodGroup CRD is not installed; kubectl apply -f crds/")
        elif self.kind in OWNER_KINDS:  # one line: their pods are placed as they come
            log.info(
                "owner kind not served, or not ours to list (no RBAC): its pods get no gang "
                "from it; looking again later",
                kind=self.kind,
            )
        else:  # the others are optional: their gangs' PodGroupNotFound says so
            log.info("kind not served; looking again later", kind=self.kind)
        self._served = False
        self._absent_pause = 1.0
        return True

    async def _watch_once(self) -> None:
        """One watch stream, in a task of its own so that ``relist`` can cut it short, and
        given up once it outlives its own timeout (the server ends it before)."""
        me = asyncio.current_task()
        cancelling = me.cancelling() if me else 0
        self._watching = watching = asyncio.create_task(self._watch())
        try:
            async with asyncio.timeout(self._timeout_seconds + self._grace_seconds):
                await asyncio.shield(watching)
        except TimeoutError:
            watching.cancel()
            log.warning("watch silent past its timeout; resuming", kind=self.kind)
        except asyncio.CancelledError:
            # ``relist`` cancelled the stream, not someone this task: go and LIST.
            if watching.cancelled() and (me is None or me.cancelling() == cancelling):
                raise _Interrupted from None
            watching.cancel()
            raise
        finally:
            self._watching = None

    async def _watch(self) -> None:
        path = self._path
        query = "&" if "?" in path else "?"
        query += (
            f"watch=1&allowWatchBookmarks=true&resourceVersion={self._version}"
            f"&timeoutSeconds={self._timeout_seconds}"
        )
        async for event in self._api.stream(path + query):
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
                self._failures = 0

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        """A malformed object must never end the watch: it is logged and ignored."""
        try:
            if kind == "DELETED":
                self._watched.drop(self._cache, self._watched.key_of(obj))
            else:
                self._watched.fold(self._cache, obj)
        except Exception:
            log.exception("could not read object; it is ignored", kind=self.kind)


class Informers:
    """The informers of every watched kind, run and asked to re-list together."""

    def __init__(self, informers: list[Informer]) -> None:
        self._all = {informer.kind: informer for informer in informers}
        self._pending: list[asyncio.Future[None]] = []

    @property
    def listed(self) -> dict[str, asyncio.Event]:
        """Per kind, set once its first LIST is in the cache."""
        return {kind: informer.listed for kind, informer in self._all.items()}

    def unlisted(self) -> str:
        """The kinds whose first LIST is not in yet, each with its last error."""
        return "; ".join(
            f"{kind}: {informer.last_error or 'no answer yet'}"
            for kind, informer in self._all.items()
            if not informer.listed.is_set()
        )

    def start(self) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(informer.run(), name=f"informer {kind}")
            for kind, informer in self._all.items()
        ]

    def everything(self) -> None:
        """A fresh LIST of every kind, which ``settled`` waits for: this replica just
        became leader, and its watches may lag behind the old leader's last binds (both
        were cut off by the same outage, say)."""
        self._pending = [f for f in self._pending if not f.done()]
        self._pending += [informer.relist() for informer in self._all.values()]

    async def settled(self) -> None:
        """Wait until every re-list asked for is in the cache: a pass on a cache that may
        lag behind would place members in room that is taken."""
        while pending := [f for f in self._pending if not f.done()]:
            await asyncio.wait(pending)


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
