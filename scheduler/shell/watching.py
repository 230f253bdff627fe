"""Our own LIST-then-WATCH loops: the informers of the busy kinds, and a label-selected watch
for the few ConfigMaps of seed 004.

``Informer`` keeps pods, nodes and PodGroups in the cache as client-go's reflector does:
one LIST (paged), then a WATCH from its resourceVersion, resumed from the last version seen
when the stream ends or breaks, and a new LIST only when the server says that version is
gone (410). kopf did this for us, but spent more per event than the rest of the scheduler:
a third of the process's time at 1,000 nodes (its per-object handler machinery and
bookkeeping for features we do not use), and about 0.4 ms per listed object before the
first pass. kopf still watches the quiet kinds and runs the operator's frame.

``LabelWatch``: kopf watches a whole kind and filters in the process; for ConfigMaps that is
every one in the cluster, for the handful we want. Here the API server filters: an object that stops
matching (its label removed) arrives as DELETED, as it does for any selector watch. Any end
of the stream (a timeout, 410 Gone, a dropped connection) starts over with a fresh LIST,
which also reports as deleted whatever vanished in between; with a selector that LIST is
small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.syncing import LISTS, UPSERTS, fold_listing, key_of, list_versioned, remove

log = structlog.get_logger()


class _Expired(Exception):
    """The resourceVersion a watch asked for is gone (410): only a new LIST can go on."""


class Informer:
    """One kind, listed and then watched into the cache, for as long as it runs.

    Never ends by itself: every failure (no answer, 5xx, 429, a payload cut short, a bug
    in a codec) is logged, counted when it is ours, and followed by a resumed watch after
    a backoff; the API server being away is what /healthz reports. A PodGroup kind the
    server does not serve counts as listed (empty) and is listed again every
    ``absent_seconds``, so a CRD installed later is picked up.
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
    ) -> None:
        self.kind = kind
        self.listed = asyncio.Event()  # the first LIST is in the cache
        self._api = api
        self._cache = cache
        self._poke = poke
        self._errored = errored
        self._retry_seconds = retry_seconds
        self._max_retry_seconds = max_retry_seconds
        self._timeout_seconds = timeout_seconds
        self._absent_seconds = absent_seconds
        self._upsert = UPSERTS[kind]
        self._version: str | None = None  # where the watch takes up; None: LIST first
        self._served = True
        self.lists = 0  # how many LISTs it took (1 unless a version expired)

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                if self._version is None:
                    await self._list()
                    if self._version is None:  # not served: look again later
                        await asyncio.sleep(self._absent_seconds)
                        continue
                await self._watch()
                failures = 0  # the stream ended as streams do (timeoutSeconds): resume
            except _Expired:
                log.info("watch expired; listing again", kind=self.kind)
                self._version = None
            except Exception as error:  # ApiError, or a bug: the watch must go on either way
                if isinstance(error, ApiError) and error.status == 410:
                    log.info("watch expired; listing again", kind=self.kind)
                    self._version = None
                    continue
                if not isinstance(error, ApiError):
                    self._errored()
                    log.exception("watch failed; resuming", kind=self.kind)
                else:
                    log.warning("watch failed; resuming", kind=self.kind, error=str(error))
                failures += 1
                delay = self._retry_seconds * 2 ** min(failures - 1, 10)
                await asyncio.sleep(min(delay, self._max_retry_seconds))

    async def _list(self) -> None:
        since = self._cache.delivered
        items, version = await list_versioned(self._api, self.kind)
        if version is None and self._served:
            log.info("kind not served; looking again later", kind=self.kind)
        elif version is not None and not self._served:
            log.info("kind now served; watching it", kind=self.kind)
        self._served = version is not None
        fold_listing(self._cache, self.kind, items, since=since)
        self.lists += 1
        self._version = version or None
        self.listed.set()
        self._poke()

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
