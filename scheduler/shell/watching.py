"""A LIST-then-WATCH of one kind by label selector, for the few ConfigMaps of seed 004.

kopf watches a whole kind and filters in the process; for ConfigMaps that is every one in
the cluster, for the handful we want. Here the API server filters: an object that stops
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

from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()

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
