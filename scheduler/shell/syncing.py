"""Knowing when the watches have delivered the whole cluster, before the first pass.

A scheduler that decides on half a cluster double-books nodes it has not heard of yet, or
takes a half-bound gang for a new one. So the loop starts only once every informer's first
LIST is in the cache, and every labelled ConfigMap a fresh LIST shows has come through its
watch (an object deleted between the LIST and its watch never comes: that LIST is repeated
now and then, and what is gone is no longer waited for). Here too: the kinds' LISTs, and
how a LIST is folded into the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.discovery import group_version, served_path
from scheduler.shell.kinds import WATCHED

log = structlog.get_logger()

# Only names and uids are needed here: metadata-only lists are a fraction of the size.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


async def list_objects(
    api: ApiClient, kind: str, *, metadata_only: bool = False
) -> list[dict[str, Any]]:
    """Every object of a watched kind, paging through large lists; [] for a PodGroup kind
    the API server does not serve (its CRD not installed, the Workload API off): the watch
    of such a kind delivers nothing, and the first sync must not wait for it."""
    items, _ = await list_versioned(api, kind, metadata_only=metadata_only)
    return items


async def list_versioned(
    api: ApiClient, kind: str, *, metadata_only: bool = False, readable_only: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """``list_objects`` and the resourceVersion of the LIST, where a watch takes up; None
    for a PodGroup kind the API server does not serve (then no objects either).
    ``readable_only``: a kind we may not read (403) lists nothing too."""
    items: list[dict[str, Any]] = []

    async def keep(page: list[dict[str, Any]]) -> None:
        items.extend(page)

    version = await list_pages(
        api, kind, each=keep, metadata_only=metadata_only, readable_only=readable_only
    )
    return items, version


# Objects per page of a LIST, as client-go's pager asks. Pages are fetched while the last one
# is folded in. A page is decoded in one call that holds the interpreter: 1,000 KWOK nodes
# were 40-58 ms of the event loop's CPU at a stretch.
PAGE_SIZE = 500


async def listed_path(api: ApiClient, kind: str) -> str:
    """Where ``kind`` is listed and watched: its path, at the version served if it has
    several."""
    watched = WATCHED[kind]
    if not watched.versions:
        return watched.path
    return await served_path(api, watched.path, watched.versions)


async def list_pages(
    api: ApiClient,
    kind: str,
    *,
    each: Callable[[list[dict[str, Any]]], Awaitable[None]],
    metadata_only: bool = False,
    readable_only: bool = False,
    path: str | None = None,
) -> str | None:
    """Every page of a LIST of ``kind`` (at ``path``: else the version of it served, found
    now) handed to ``each`` in turn; returns the LIST's resourceVersion, or None (and no
    pages) for a PodGroup kind the API server does not serve. A kind listed at one of
    several versions has each item stamped with its apiVersion (a LIST's items carry none),
    as a watch's objects are. The next page is asked for before ``each`` gets this one: the
    API server reads and encodes it while we decode and fold (``each`` should hand the event
    loop back now and then, so the request goes out). At start-up, 5,000 pods at 1,000
    nodes, folding was a third of the LIST's time and waited for the last page."""
    accept = METADATA_ONLY if metadata_only else "application/json"
    watched = WATCHED[kind]
    if path is None:
        path = await listed_path(api, kind)
    query = "&" if "?" in path else "?"
    stamp = group_version(path) if watched.versions else ""

    async def fetch(token: str) -> dict[str, Any]:
        page = f"limit={PAGE_SIZE}&continue={token}" if token else f"limit={PAGE_SIZE}"
        answer = await api.request("GET", path + query + page, accept=accept)
        if stamp:
            for item in answer.get("items") or []:
                item.setdefault("apiVersion", stamp)
        return answer

    following: asyncio.Future[dict[str, Any]] | None = asyncio.ensure_future(fetch(""))
    try:
        while following is not None:
            try:
                page = await following
            except ApiError as error:
                if error.status == 404 and watched.optional:
                    return None
                if error.status == 403 and (watched.restricted or readable_only):
                    return None  # not ours to read: placed as if it did not exist
                raise
            meta = page.get("metadata") or {}
            token = meta.get("continue", "")
            # Every page of a LIST is read at the first page's resourceVersion.
            following = asyncio.ensure_future(fetch(token)) if token else None
            await each(page.get("items") or [])
        return str(meta.get("resourceVersion") or "")
    finally:  # failed or cancelled (a shutdown) while a page was asked for: not left behind
        if following is not None and not following.done():
            following.cancel()
            with contextlib.suppress(BaseException):
                await following


async def list_keys(api: ApiClient, *, skip: Collection[str] = ()) -> set[tuple[str, str]]:
    """Every object of the watched kinds but ``skip``, as (kind, key). The kinds are listed
    at once: one after the other, the 16 round trips were most of the first sync on a
    small cluster, and they stand between the start and the first bind."""
    kinds = [kind for kind in WATCHED if kind not in skip]
    lists = await asyncio.gather(*(list_objects(api, kind, metadata_only=True) for kind in kinds))
    return {
        (kind, WATCHED[kind].key_of(item))
        for kind, items in zip(kinds, lists, strict=True)
        for item in items
    }


async def wait_until_synced(
    api: ApiClient,
    cache: ClusterCache,
    *,
    relist_seconds: float = 5.0,
    stall_seconds: float = 15.0,
    listed: Mapping[str, asyncio.Event] | None = None,
) -> None:
    """Wait until the watches delivered every object a LIST shows. Raises TimeoutError if
    a kind has objects but not one of them came through in ``stall_seconds`` while the
    API server answers: its watch never started, so the process must be restarted,
    sooner than the caller's overall limit (a watcher that resolves its kinds once, as kopf
    does, could miss some for good). The kinds in ``listed`` are watched by our own
    informers, whose first LIST is the cache's: their event says when it is folded in, and
    they are not listed a second time here."""
    listed = listed or {}
    started = time.monotonic()
    expected = await list_keys(api, skip=listed)
    relisted = time.monotonic()
    while missing := cache.unseen(expected):
        # Checked every 10 ms (the pass waits on it), but only recounted once the watches
        # delivered more: a set difference of the whole cluster is not free.
        checked = cache.delivered
        while cache.delivered == checked and time.monotonic() - relisted <= relist_seconds:
            await asyncio.sleep(0.01)
        if time.monotonic() - relisted > relist_seconds:
            expected &= await list_keys(api, skip=listed) | (expected - missing)
            relisted = time.monotonic()
            still = cache.unseen(expected)
            log.info("waiting for the watches", missing=len(still))
            dead = sorted({kind for kind, _ in still} - {kind for kind, _ in expected - still})
            if dead and relisted - started > stall_seconds:
                raise TimeoutError(
                    f"no {', '.join(dead)} came through the watches in "
                    f"{relisted - started:.0f}s although the API server lists them"
                )
    for event in listed.values():
        await event.wait()
    cache.stop_tracking()
    log.info(
        "cache synced; scheduling starts",
        objects=len(expected),
        seconds=round(time.monotonic() - started, 2),
    )


def fold_listing(
    cache: ClusterCache, kind: str, items: list[dict[str, Any]], *, since: int
) -> list[str]:
    """Fold a whole LIST of ``kind`` into the cache (``Folding``, in one go). Returns the
    keys removed."""
    folding = Folding(cache, kind, since=since)
    folding.page(items)
    return folding.finish()


class Folding:
    """A LIST of ``kind`` begun when the cache had had ``since`` deliveries (what
    ``cache.listing`` said as it began), folded into the cache page by page, as an
    informer's re-list does: take in every object no watch delivered since the LIST began (a
    bind that landed while the watch was away: placing on the room it took would overcommit
    the node), and, once the last page is in, drop whatever the LIST no longer shows (a
    re-list delivers what exists, never a DELETED for what does not any more). A page folded
    before the last one leaves each object it holds at least as new as it was, so a pass in
    between sees nothing older than before."""

    def __init__(self, cache: ClusterCache, kind: str, *, since: int) -> None:
        self._cache, self._kind, self._since = cache, kind, since
        self._watched = WATCHED[kind]
        self._listed: set[str] = set()
        self._folded = 0
        self._over = False

    def page(self, items: list[dict[str, Any]]) -> None:
        cache, kind, since, watched = self._cache, self._kind, self._since, self._watched
        for item in items:
            try:
                key = watched.key_of(item)
            except (KeyError, TypeError):
                log.warning("listed object without a name; ignored", kind=kind)
                continue
            self._listed.add(key)
            if cache.stale(kind, key, since=since):
                try:
                    watched.fold(cache, item)
                except Exception:  # a shape no codec foresaw: the watch's handler says so too
                    log.exception("listed object not folded in", kind=kind, key=key)
                    continue
                self._folded += 1

    def finish(self) -> list[str]:
        """After the last page: remove what vanished. Returns the keys removed."""
        cache, kind, since = self._cache, self._kind, self._since
        gone = cache.vanished(kind, self._listed, since=since)
        log.debug(
            "listing folded in",
            kind=kind,
            listed=len(self._listed),
            folded=self._folded,
            gone=len(gone),
        )
        for key in gone:
            self._watched.drop(cache, key)
        self.close()
        if gone:
            log.info(
                "removed what vanished while the watch was away",
                kind=kind,
                count=len(gone),
                examples=gone[:5],
            )
        return gone

    def close(self) -> None:
        """The LIST is over, folded in or failed: the cache keeps no stamps for it."""
        if not self._over:
            self._over = True
            self._cache.listed(self._kind, since=self._since)
