"""Events, posted in the background: best effort, never in the way of binding."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid

import structlog

from scheduler.model.decisions import Event
from scheduler.model.times import format_time
from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()

_API_VERSIONS = {"Pod": "v1", "PodGroup": "scheduling.x-k8s.io/v1alpha1"}


class EventRecorder:
    def __init__(
        self, api: ApiClient, *, component: str, concurrency: int = 8, backlog: int = 2000
    ):
        self._api = api
        self._component = component
        self._instance = socket.gethostname()
        self._slots = asyncio.Semaphore(concurrency)
        self._backlog = backlog
        self._pending = 0
        self.dropped = 0

    def body(self, event: Event, *, now: float) -> dict:
        ref = event.regarding
        stamp = format_time(now)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": _API_VERSIONS.get(ref.kind, "v1"),
                "kind": ref.kind,
                "namespace": ref.namespace,
                "name": ref.name,
                "uid": ref.uid,
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": event.type,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    async def record(self, event: Event) -> None:
        if self._pending >= self._backlog:
            self.dropped += 1
            return
        self._pending += 1
        try:
            async with self._slots:
                ns = event.regarding.namespace
                await self._api.post(
                    f"/api/v1/namespaces/{ns}/events", self.body(event, now=time.time())
                )
        except (TimeoutError, ApiError, OSError) as error:
            log.warning("event not recorded", reason=event.reason, error=str(error))
        finally:
            self._pending -= 1
