"""The kopf operator: the only module that imports kopf.

Watch events on Pods, Nodes, PodGroups and PriorityClasses become cache updates; nothing
here decides anything. The handlers are *index* handlers on purpose: kopf holds every other
handler back until all indexed kinds have been listed once, so the first ``on.event`` call
tells us the cache holds the whole cluster. Only then does the scheduling loop start, so a
restarted scheduler never mistakes a half-listed cluster for the truth (bound pods it had
not seen yet, gangs that look incomplete).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf
import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.objects import (
    node_from_dict,
    pod_from_dict,
    podgroup_from_dict,
    priority_class_from_dict,
)
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from scheduler.shell.api import ApiClient, Credentials
from scheduler.shell.binding import Binder
from scheduler.shell.looping import SchedulingLoop
from scheduler.shell.patching import Patcher
from scheduler.shell.recording import EventRecorder

log = structlog.get_logger()


@dataclass(frozen=True)
class Runtime:
    """What the handlers share; passed to kopf as its memo, so there is no global state."""

    cache: ClusterCache
    loop: SchedulingLoop


def _guarded(what: str, apply: Callable[[], None]) -> None:
    """A malformed object must never take a handler (or the operator) down."""
    try:
        apply()
    except Exception:
        log.exception("could not read object; it is ignored", kind=what)


def build_registry(credentials: Credentials) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=credentials.server,
            ca_path=credentials.ca_file,
            certificate_path=credentials.cert_file,
            private_key_path=credentials.key_file,
            token=credentials.bearer(),
            insecure=not credentials.verify,
        )

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # our Events are our own; kopf's would be noise
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330

    kinds: list[
        tuple[tuple[str, ...], Callable[[Runtime, Any], None], Callable[[Runtime, Any], None]]
    ] = [
        (
            ("v1", "pods"),
            lambda rt, body: rt.cache.upsert_pod(pod_from_dict(body)),
            lambda rt, body: rt.cache.remove_pod(body["metadata"]["uid"]),
        ),
        (
            ("v1", "nodes"),
            lambda rt, body: rt.cache.upsert_node(node_from_dict(body)),
            lambda rt, body: rt.cache.remove_node(body["metadata"]["name"]),
        ),
        (
            ("scheduling.x-k8s.io", "v1alpha1", "podgroups"),
            lambda rt, body: rt.cache.upsert_podgroup(podgroup_from_dict(body)),
            lambda rt, body: rt.cache.remove_podgroup(
                GangKey(body["metadata"]["namespace"], body["metadata"]["name"])
            ),
        ),
        (
            ("scheduling.k8s.io", "v1", "priorityclasses"),
            lambda rt, body: rt.cache.upsert_priority_class(priority_class_from_dict(body)),
            lambda rt, body: rt.cache.remove_priority_class(body["metadata"]["name"]),
        ),
    ]
    for resource, upsert, remove in kinds:
        name = resource[-1]

        def index(body: kopf.Body, memo: Runtime, _upsert=upsert, _name=name, **_: Any) -> None:
            _guarded(_name, lambda: _upsert(memo, body))
            memo.loop.poke()

        def event(
            event: kopf.RawEvent,
            body: kopf.Body,
            memo: Runtime,
            _remove=remove,
            _name=name,
            **_: Any,
        ) -> None:
            if event.get("type") == "DELETED":
                _guarded(_name, lambda: _remove(memo, body))
            memo.loop.mark_synced()
            memo.loop.poke()

        kopf.index(*resource, id=f"cache-{name}", registry=registry)(index)
        kopf.on.event(*resource, id=f"deletions-{name}", registry=registry)(event)
    return registry


async def run_operator(
    *,
    credentials: Credentials,
    config: Config,
    bind_concurrency: int = 32,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the watches and the scheduling loop until ``stop`` is set (or forever)."""
    logging.getLogger("kopf").setLevel(logging.WARNING)
    cache = ClusterCache(scheduler_name=config.scheduler_name)
    api = ApiClient(credentials, connections=bind_concurrency + 32)
    recorder = EventRecorder(api, component=config.scheduler_name)
    wake = asyncio.Event()
    binder = Binder(
        api, cache, recorder, config=config, concurrency=bind_concurrency, poke=wake.set
    )
    loop = SchedulingLoop(
        cache=cache,
        config=config,
        binder=binder,
        patcher=Patcher(api),
        recorder=recorder,
        wake=wake,
    )
    runtime = Runtime(cache=cache, loop=loop)
    scheduling = asyncio.create_task(loop.run(), name="scheduling loop")
    try:
        await kopf.operator(
            registry=build_registry(credentials),
            clusterwide=True,
            standalone=True,
            memo=runtime,
            stop_flag=stop,
        )
    finally:
        scheduling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await scheduling
        await loop.drain()
        await api.close()
