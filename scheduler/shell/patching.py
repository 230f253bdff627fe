"""Writes of state the core decided: PodGroup status, the pods' timeout mark, and what a
topology-placed gang writes back once bound (ranks, placement, Sakkara's timings).

A write is skipped when the same content was already sent for that object: the core asks
again until the watch brings the new state back, and the API server need not hear it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime

import structlog

from scheduler.codecs.objects import WHOLE_GANG_MARK
from scheduler.codecs.podgroups import podgroup_status_to_dict
from scheduler.model import names
from scheduler.model.decisions import (
    PREEMPTED_BY_SCHEDULER,
    STALE_GANG,
    Eviction,
    GangBinding,
    Nomination,
    PodCondition,
    PodPatch,
    StatusUpdate,
)
from scheduler.model.pods import GangKey, PodGroupApi, PodRef
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.claiming import delete_claim
from scheduler.shell.settling import Settling

log = structlog.get_logger()

# New "already sent" entries between two sweeps of those of objects gone.
SWEEP_EVERY = 1_000

# The longest wait between two tries of an eviction that found no API server.
EVICT_AGAIN_MOST_SECONDS = 30.0


class Patcher:
    def __init__(
        self,
        api: ApiClient,
        *,
        concurrency: int = 16,
        clock: Callable[[], float] = time.time,
        retry: Callable[[GangKey], None] = lambda key: None,
        retry_pod: Callable[[PodRef], None] = lambda ref: None,
        errored: Callable[[], None] = lambda: None,
        retries: int = 3,
        busy: Callable[[], bool] = lambda: False,
        yield_seconds: float = 10.0,
        fence: Callable[[], bool] = lambda: True,
        evict_again_seconds: float = 1.0,
        evict_for_seconds: float = 300.0,
        pod_known: Callable[[PodRef], bool] = lambda ref: True,
        pod_placed: Callable[[PodRef], bool] = lambda ref: False,
        gang_known: Callable[[GangKey], bool] = lambda key: True,
        identity: str = "",
    ) -> None:
        # The scheduler's name, at the start of the DisruptionTarget messages it writes (as
        # kube-scheduler's): a later pass, of this replica or another, knows its own marks.
        self._identity = identity
        # What was sent is remembered for objects the cache still knows: swept every
        # SWEEP_EVERY new entries (kept for good, it grows by one per pod and gang ever
        # written).
        self._pod_known = pod_known
        self._pod_placed = pod_placed
        self._gang_known = gang_known
        self._added = 0
        self._evict_again_seconds = max(evict_again_seconds, 0.001)  # never a spin
        self._evicting: set[str] = set()  # uids of the pods being evicted now
        self._deleting_claims: set[tuple[str, str]] = set()
        self._evict_for_seconds = evict_for_seconds
        self._closed = asyncio.Event()
        # True while this replica may write (it holds the leader Lease, or runs alone): a
        # status that waited behind binds (up to ``yield_seconds``) is not written by a
        # replica that lost the Lease meanwhile; the new leader writes its own.
        self._fence = fence
        self._errored = errored
        self._retries = retries
        self._api = api
        self._clock = clock
        # A status not written is written by a later pass: this asks for one that looks at
        # the gang again (a settled gang is not looked at unless something of it changes).
        self._retry = retry
        self._retry_pod = retry_pod
        self._slots = asyncio.Semaphore(concurrency)
        # ``busy`` says binds are in flight (or, from the operator, Events are still being
        # posted): a status write waits (at most ``yield_seconds``)
        # so that a burst of binds has the API server to itself, and meanwhile only the
        # latest status of each gang is kept, one write per gang in flight. A status patch
        # of a PodGroup costs the API server about 2.5 ms of CPU (a custom resource: merge
        # patch, schema, managed fields, three JSON watchers), more than a bind: with 1 s,
        # a backlog of 5,000 pods in 625 gangs wrote ~1,300 statuses between its binds and
        # bound at 0.52-0.57 of the bind ceiling; with 10 s, ~300, mostly after the last
        # bind, and 0.73-0.74 (bench.podgroups, 1,000 nodes, three rounds each). A status
        # is a report; the binds are what the gang waits for.
        self._binds_settled = Settling(busy, limit=yield_seconds)
        self._latest: dict[GangKey, StatusUpdate] = {}
        self._sent_status: dict[GangKey, dict] = {}
        self._sent_pods: dict[PodRef, dict] = {}
        self._sent_conditions: dict[PodRef, dict] = {}

    def _remembered(self) -> None:
        """One more write remembered: every SWEEP_EVERY, forget those of objects gone."""
        self._added += 1
        if self._added < SWEEP_EVERY:
            return
        self._added = 0
        for sent, known in (
            (self._sent_status, self._gang_known),
            (self._sent_pods, self._pod_known),
            (self._sent_conditions, self._pod_known),
        ):
            for key in [k for k in sent if not known(k)]:
                del sent[key]

    def close(self) -> None:
        """On shutdown: writes being tried again give up, so that draining ends."""
        self._closed.set()

    async def status(self, update: StatusUpdate) -> None:
        """Write the status a pass decided for a gang, or hand it to the write of that gang
        already waiting or in flight, which then writes the latest it has been given. Passes
        under load decide a status per gang several times a second (scheduled, then each
        member running): 300 writes for 50 gangs of 8 bound in a burst, each competing with
        the binds. Now a burst's statuses wait behind its binds and go once per gang."""
        owner = update.gang not in self._latest
        self._latest[update.gang] = update
        if not owner:
            return
        try:
            await self._binds_settled.wait()
            while (latest := self._latest.get(update.gang)) is not None:
                await self._write_status(latest)
                if self._latest.get(update.gang) is latest:
                    break
        finally:
            self._latest.pop(update.gang, None)

    async def _write_status(self, update: StatusUpdate) -> None:
        """Where each kind keeps it: ours and the upstream PodGroup in the status
        subresource (the upstream one by a strategic merge of its conditions by type, as
        kube-scheduler patches it, so conditions others write stay), Volcano's in the object
        itself (its CRD has no status subresource)."""
        body = podgroup_status_to_dict(update.status, update.api)
        if self._sent_status.get(update.gang) == body or not self._fence():
            return
        self._sent_status[update.gang] = body
        self._remembered()
        ns, name = update.gang.namespace, update.gang.name
        version = update.api_version if update.api is PodGroupApi.WORKLOAD else ""
        path = f"/apis/{version or update.api.value}/namespaces/{ns}/podgroups/{name}"
        try:
            async with self._slots:
                if update.api is PodGroupApi.WORKLOAD:
                    await self._api.strategic_patch(
                        f"{path}/status", {"status": body}, retries=self._retries
                    )
                elif update.api is PodGroupApi.VOLCANO:
                    await self._api.merge_patch(path, {"status": body}, retries=self._retries)
                else:
                    await self._api.merge_patch(
                        f"{path}/status", {"status": body}, retries=self._retries
                    )
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            self._sent_status.pop(update.gang, None)  # try again on the next pass
            if not (isinstance(error, ApiError) and error.status == 404):  # PodGroup deleted
                self._retry(update.gang)
            log.warning("podgroup status not written", gang=str(update.gang), error=str(error))

    async def pod(self, patch: PodPatch) -> None:
        body = {"metadata": {"annotations": dict(patch.annotations)}}
        if self._sent_pods.get(patch.pod) == body:
            return
        self._sent_pods[patch.pod] = body
        self._remembered()
        ns, name = patch.pod.namespace, patch.pod.name
        try:
            async with self._slots:
                await self._api.merge_patch(
                    f"/api/v1/namespaces/{ns}/pods/{name}", body, retries=self._retries
                )
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            if isinstance(error, ApiError) and error.status == 404:
                return  # a deleted pod needs no mark
            # The next pass that looks at the gang asks again (not at once: a mark refused
            # for good would be asked for pass after pass); the PodGroup-less gang of a pod
            # is otherwise looked at only on its pods' next change, so touch it.
            self._sent_pods.pop(patch.pod, None)
            self._retry_pod(patch.pod)
            log.warning("pod not annotated", pod=str(patch.pod), error=str(error))

    async def condition(self, update: PodCondition) -> None:
        """The pod's PodScheduled condition, by a strategic merge patch of its status (the
        kubelet's conditions stay); kube-scheduler's ``PatchPodStatus`` does the same."""
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": update.status,
                        "reason": update.reason,
                        "message": update.message,
                        "lastProbeTime": None,
                        "lastTransitionTime": update.last_transition,
                    }
                ]
            }
        }
        if self._sent_conditions.get(update.pod) == body:
            return
        self._sent_conditions[update.pod] = body
        self._remembered()
        ns, name = update.pod.namespace, update.pod.name
        try:
            async with self._slots:
                await self._api.strategic_patch(
                    f"/api/v1/namespaces/{ns}/pods/{name}/status", body, retries=self._retries
                )
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            # The next failed attempt writes it again; a deleted or bound pod needs none.
            self._sent_conditions.pop(update.pod, None)
            if not (isinstance(error, ApiError) and error.status == 404):
                log.warning("pod condition not written", pod=str(update.pod), error=str(error))

    async def evict(self, evictions: Iterable[Eviction]) -> set[str]:
        """A pass's victims (gang preemption's, a stale gang's members, consolidation's
        moves). Each is marked first, its ``DisruptionTarget`` condition (so its controller
        and the kubelet know why it goes, as kube-scheduler marks its victims), then deleted
        gracefully, only this very pod (uid precondition); a move goes through the Eviction
        API, which marks it itself.

        Every mark of the pass is written before any delete is sent: a stop, or a Lease
        lost, between the two leaves every victim marked and running, or none deleted,
        never a gang's members deleted beside unmarked ones that nothing would choose
        again (the next leader finishes what is marked, ``finish-evictions``). A mark that
        cannot be written sends no delete of the pass.

        A write that fails for want of an answer (the API server down, a 5xx, a 429) is
        sent again, with a growing wait, for ``evict_for_seconds``.

        Returns the uids of the victims it sent that still run: nothing was sent for them,
        or it was refused (a move its PodDisruptionBudget forbids). One found gone is going."""
        mine = [e for e in evictions if e.pod.uid not in self._evicting]
        # A pass may decide a pod again while it is being sent: one sender is enough.
        self._evicting.update(e.pod.uid for e in mine)
        try:
            moves = [e for e in mine if e.moved_to]
            marked = [e for e in mine if not e.moved_to]
            sent = await asyncio.gather(
                *(self._until_done(e, self._move_once) for e in moves),
                *(self._until_done(e, self._mark_once) for e in marked),
            )
            outcomes = sent[len(moves) :]
            staying = _staying(moves, sent[: len(moves)])
            if FAILED in outcomes:
                log.warning(
                    "victims marked but not deleted: a mark could not be written; the next "
                    "pass finishes what is marked",
                    victims=len(marked),
                )
                return staying | {e.pod.uid for e in marked}
            deleting = [e for e, outcome in zip(marked, outcomes, strict=True) if outcome is DONE]
            deleted = await asyncio.gather(
                *(self._until_done(e, self._delete_once) for e in deleting)
            )
            return staying | _staying(deleting, deleted)
        finally:
            self._evicting.difference_update(e.pod.uid for e in mine)

    async def _until_done(
        self, eviction: Eviction, step: Callable[[Eviction], Awaitable[Exception | None]]
    ) -> str:
        """``step`` until it is done or cannot be: DONE, GONE (the pod is gone already, or
        another by its name is there), REFUSED (a move its PodDisruptionBudget forbids) or
        FAILED."""
        ref = eviction.pod
        started = time.monotonic()
        wait = self._evict_again_seconds
        while True:
            if self._closed.is_set() or not self._fence():
                # Shutting down, or the Lease is lost (it may have been, while this waited
                # for a slot): this replica writes nothing more; the next leader finishes
                # what was marked.
                log.warning("victim not evicted: no longer the leader", pod=str(ref))
                return FAILED
            error = await step(eviction)
            if error is None:
                return DONE
            if isinstance(error, ApiError) and error.status in (404, 409):
                return GONE  # gone already, or another pod by that name now: nothing to do
            if eviction.moved_to and _budget_forbids(error):
                # The Eviction API keeps the pod's PodDisruptionBudget: it stays, and a
                # later pass (which weighs budgets too) may move another.
                log.info("pod not moved: its PodDisruptionBudget forbids it now", pod=str(ref))
                return REFUSED
            # A failure of ours (not the API server's) would fail again: said, not retried.
            transient = isinstance(error, ApiError) and error.transient
            if not transient or time.monotonic() - started + wait > self._evict_for_seconds:
                log.warning("victim not evicted", pod=str(ref), error=str(error))
                return FAILED
            log.info("victim not evicted yet; sending it again", pod=str(ref), error=str(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), wait)
            if self._closed.is_set() or not self._fence():
                # Shutting down, or the Lease is lost: this replica writes nothing more.
                log.warning("victim not evicted", pod=str(ref), error=str(error))
                return FAILED
            wait = min(wait * 2, EVICT_AGAIN_MOST_SECONDS)

    async def _mark_once(self, eviction: Eviction) -> Exception | None:
        ref = eviction.pod
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": STALE_GANG if eviction.stale else PREEMPTED_BY_SCHEDULER,
            "message": (
                f"{self._identity}: {WHOLE_GANG_MARK if eviction.whole_gang else ''}"
                f"{eviction.message}"
                if self._identity
                else eviction.message
            ),
            "lastTransitionTime": _timestamp(self._clock()),
        }
        try:
            async with self._slots:
                if self._closed.is_set() or not self._fence():
                    return None  # it waited for a slot past the Lease: the next leader's
                # The uid makes the mark a precondition too: never on another pod by the
                # same name (a StatefulSet's, made again after a delete that did land).
                await self._api.strategic_patch(
                    f"{_pod_path(ref)}/status",
                    {"metadata": {"uid": ref.uid}, "status": {"conditions": [condition]}},
                    retries=self._retries,
                )
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            return error
        return None

    async def _delete_once(self, eviction: Eviction) -> Exception | None:
        ref = eviction.pod
        try:
            async with self._slots:
                if self._closed.is_set() or not self._fence():
                    return None  # it waited for a slot past the Lease: the next leader's
                await self._api.request(
                    "DELETE",
                    _pod_path(ref),
                    body={"apiVersion": "v1", "kind": "DeleteOptions",
                          "preconditions": {"uid": ref.uid}},
                    retries=self._retries,
                )  # fmt: skip
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            return error
        return None

    async def _move_once(self, eviction: Eviction) -> Exception | None:
        """Consolidation's eviction: through the Eviction API, which marks the pod
        (DisruptionTarget, EvictionByEvictionAPI) and refuses what its
        PodDisruptionBudget forbids; only this very pod (uid precondition)."""
        ref = eviction.pod
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": ref.name, "namespace": ref.namespace},
            "deleteOptions": {"preconditions": {"uid": ref.uid}},
        }
        try:
            async with self._slots:
                if self._closed.is_set() or not self._fence():
                    return None  # it waited for a slot past the Lease: nothing more is sent
                await self._api.post(f"{_pod_path(ref)}/eviction", body)
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            return error
        return None

    async def delete_made_claim(self, namespace: str, name: str) -> None:
        """Delete a claim an attempt that did not bind made for a pod's extended resources
        (``delete_claim``); the next pass after it is gone tries the pod again."""
        key = (namespace, name)
        if not self._fence() or key in self._deleting_claims:
            return  # one delete at a time: every pass names it until the watch shows it gone
        self._deleting_claims.add(key)
        try:
            async with self._slots:
                await delete_claim(self._api, namespace=namespace, name=name)
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            log.warning(
                "claim left by an attempt that did not bind not deleted; tried again next pass",
                claim=f"{namespace}/{name}",
                error=str(error),
            )
        finally:
            self._deleting_claims.discard(key)

    async def nominate(self, nomination: Nomination) -> None:
        """``status.nominatedNodeName`` (cleared with ""), as kube-scheduler sets it."""
        ref = nomination.pod
        body = {"status": {"nominatedNodeName": nomination.node or None}}
        try:
            async with self._slots:
                if nomination.node and self._pod_placed(ref):
                    # It waited for the slot while a later pass bound it: the API server
                    # refuses a nomination on a bound pod, and it would say nothing.
                    return
                await self._api.merge_patch(
                    f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}/status",
                    body,
                    retries=self._retries,
                )
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            if not (isinstance(error, ApiError) and error.status == 404):
                log.warning("nomination not written", pod=str(ref), error=str(error))

    async def placement(self, gang_binding: GangBinding, pass_seconds: float) -> None:
        """Sakkara's write-back: rank labels on every pod, the placement on the PodGroup
        (annotation) or the group ConfigMap (status, placement, rank, timings)."""
        placement = gang_binding.placement
        if placement is None:
            return
        end = self._clock()
        writes = [
            self._write(
                f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}",
                {
                    "metadata": {
                        "labels": {
                            names.SAKKARA_RANK: str(rank),
                            names.SAKKARA_STATUS: "Bound",
                            names.SAKKARA_RETRIES: str(placement.retries),
                        }
                    }
                },
                what=f"pod {ref}",
                gang=str(gang_binding.gang),
            )
            for ref, rank in placement.ranks
        ]
        if placement.podgroup is not None:
            ns, name = placement.podgroup.namespace, placement.podgroup.name
            writes.append(
                self._write(
                    f"/apis/{placement.podgroup_version or placement.podgroup_api.value}"
                    f"/namespaces/{ns}/podgroups/{name}",
                    {"metadata": {"annotations": {names.PLACEMENT: placement.tree}}},
                    what=f"podgroup {ns}/{name}",
                    gang=str(gang_binding.gang),
                )
            )
        if placement.group is not None:
            ns, name = placement.group
            begin = min(placement.begin, end)
            data = {
                "status": "Bound",
                "placement": placement.tree,
                "rank": json.dumps([[ref.name, rank] for ref, rank in placement.ranks]),
                "schedBeginTime": _timestamp(begin),
                "schedEndTime": _timestamp(end),
                "schedSolverTimeMilli": str(round(pass_seconds * 1000)),
                "schedTotalTimeMilli": str(round((end - begin) * 1000)),
            }
            writes.append(
                self._write(
                    f"/api/v1/namespaces/{ns}/configmaps/{name}",
                    {"data": data},
                    what=f"group ConfigMap {ns}/{name}",
                    gang=str(gang_binding.gang),
                )
            )
        await asyncio.gather(*writes)

    async def _write(self, path: str, body: dict, *, what: str, gang: str) -> None:
        try:
            async with self._slots:
                await self._api.merge_patch(path, body, retries=self._retries)
        except Exception as error:
            if not isinstance(error, ApiError):
                self._errored()
            log.warning("placement not written back", gang=gang, object=what, error=str(error))


def _timestamp(seconds: float) -> str:
    """RFC 3339 with microseconds, as Sakkara shows its timings."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _budget_forbids(error: Exception) -> bool:
    """Whether the Eviction API refused for a PodDisruptionBudget (429, as kubectl drain
    reads it), not for the API server's load."""
    return (
        isinstance(error, ApiError)
        and error.status == 429
        and "disruption budget" in error.message.lower()
    )


# What came of sending one victim's mark, delete or move (``Patcher._until_done``).
DONE, GONE, REFUSED, FAILED = "done", "gone", "refused", "failed"


def _staying(evictions: list[Eviction], outcomes: list[str]) -> set[str]:
    """The victims that still run: nothing was sent for them, or it was refused. One found
    gone is going (the watch shows it gone soon), as is one whose write landed."""
    return {
        e.pod.uid
        for e, outcome in zip(evictions, outcomes, strict=True)
        if outcome in (FAILED, REFUSED)
    }


def _pod_path(ref: PodRef) -> str:
    return f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}"
