"""Writes of state the core decided: PodGroup status and the pods' timeout mark.

A write is skipped when the same content was already sent for that object: the core asks
again until the watch brings the new state back, and the API server need not hear it twice.
"""

from __future__ import annotations

import asyncio

import structlog

from scheduler.codecs.objects import podgroup_status_to_dict
from scheduler.model.decisions import PodPatch, StatusUpdate
from scheduler.model.pods import GangKey, PodRef
from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()


class Patcher:
    def __init__(self, api: ApiClient, *, concurrency: int = 16) -> None:
        self._api = api
        self._slots = asyncio.Semaphore(concurrency)
        self._sent_status: dict[GangKey, dict] = {}
        self._sent_pods: dict[PodRef, dict] = {}

    async def status(self, update: StatusUpdate) -> None:
        body = podgroup_status_to_dict(update.status)
        if self._sent_status.get(update.gang) == body:
            return
        self._sent_status[update.gang] = body
        ns, name = update.gang.namespace, update.gang.name
        path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}/status"
        try:
            async with self._slots:
                await self._api.merge_patch(path, {"status": body})
        except (TimeoutError, ApiError, OSError) as error:
            self._sent_status.pop(update.gang, None)  # try again on the next pass
            log.warning("podgroup status not written", gang=str(update.gang), error=str(error))

    async def pod(self, patch: PodPatch) -> None:
        body = {"metadata": {"annotations": dict(patch.annotations)}}
        if self._sent_pods.get(patch.pod) == body:
            return
        self._sent_pods[patch.pod] = body
        ns, name = patch.pod.namespace, patch.pod.name
        try:
            async with self._slots:
                await self._api.merge_patch(f"/api/v1/namespaces/{ns}/pods/{name}", body)
        except ApiError as error:
            if error.status != 404:  # a deleted pod needs no mark
                self._sent_pods.pop(patch.pod, None)
                log.warning("pod not annotated", pod=str(patch.pod), error=str(error))
        except (TimeoutError, OSError) as error:
            self._sent_pods.pop(patch.pod, None)
            log.warning("pod not annotated", pod=str(patch.pod), error=str(error))
