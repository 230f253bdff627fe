"""Binding pods through ``pods/binding``, a GangGroup at a time, with bounded concurrency.

A GangGroup that is not yet satisfied is bound commit-point first: one member of the whole
group, then (only if that succeeded) all the others at once. If the first bind is rejected,
nothing of the group is bound; all its assumptions are forgotten and every gang of it is
tried again whole after a backoff. Once one member is bound the group's gangs are satisfied,
and a later failure only sends that pod back to be placed again (after gang); should the
process die in between, the pass after the restart sees the bound members and places the
rest (each unsatisfied gang of the group still whole).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import replace

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.core.scheduling import after_failed_bind
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import (
    NORMAL,
    WARNING,
    Binding,
    Event,
    GangBinding,
    GroupBinding,
    ObjectRef,
    VolumeWrite,
)
from scheduler.model.pods import PodRef
from scheduler.model.snapshot import GangState
from scheduler.shell.api import ApiClient, ApiError
from scheduler.shell.claiming import ClaimWriter, Written
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder
from scheduler.shell.volume_binding import VolumeWriter

log = structlog.get_logger()

# How long a shutdown waits for a group's volume requests to be taken back.
TAKE_BACK_SECONDS = 5.0


class Slots:
    """At most ``size`` binds in flight; a waiting bind of a gang whose first member is bound
    (*urgent*) goes before any gang's first bind (each kind in arrival order); and a gang's
    first bind waits while the members owed by gangs in progress, with its own rest, would
    pass ``cap`` (4 x ``size``; always allowed when nothing is owed).

    With one FIFO for all, a backlog's first binds of every gang queued ahead of the rest of
    each gang: make bench (625 gangs of 8, 32 in flight) saw gangs partly bound for up to 7 s,
    their members starting that far apart. Urgent binds first cured that, but at the start of
    a backlog 32 first binds go at once: with gangs of up to 256, the last gang started waited
    for the others' thousands of members, partly bound for 4.7 s (1,000 nodes, 6,000 pods).
    The cap bounds the members bound before a started gang's last one to about
    ``cap + its size``. Members owed: urgent binds waiting or in flight, and the rest of
    each first bind in flight (``rest``); the Binder keeps a gang's rest on a ``Tab`` from
    its first bind's slot until each member's bind is over."""

    def __init__(self, size: int, *, cap: int | None = None) -> None:
        self._free = size
        self._cap = 4 * size if cap is None else cap
        self._owed = 0
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._first: deque[tuple[asyncio.Future[None], int]] = deque()

    def tab(self) -> Tab:
        """A tab for one gang's binds (``held(tab=...)``)."""
        return Tab(self)

    @contextlib.asynccontextmanager
    async def held(
        self, *, urgent: bool, rest: int = 0, tab: Tab | None = None
    ) -> AsyncIterator[None]:
        """A slot for one bind; ``rest``: for a gang's first bind, the members to follow.
        With a ``tab``, a first bind puts its rest on the tab rather than owing it until it
        ends, and a member's bind is owed on the tab already."""
        counted = tab is None
        owes = (1 if urgent else rest) if counted else 0
        await (self._acquire_urgent(counted=counted) if urgent else self._acquire_first(rest))
        if tab is not None and not urgent:
            tab.owed += rest
        try:
            yield
        finally:
            self._owed -= owes
            self._release()

    def _settle(self, members: int) -> None:
        self._owed -= members
        self._dispatch()  # fewer members owed: a first bind held back may go now

    def _opens(self, rest: int) -> bool:
        return self._owed == 0 or self._owed + rest <= self._cap

    async def _acquire_urgent(self, *, counted: bool = True) -> None:
        self._owed += counted
        if self._free > 0 and not self._urgent:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._urgent.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            self._owed -= counted
            self._given_up(waiter, self._urgent)
            raise

    async def _acquire_first(self, rest: int) -> None:
        if self._free > 0 and not self._urgent and not self._first and self._opens(rest):
            self._free -= 1
            self._owed += rest
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (waiter, rest)
        self._first.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._owed -= rest  # given its slot, and its rest counted, as it was cancelled
            self._given_up(waiter, self._first, entry)
            raise

    def _given_up(self, waiter: asyncio.Future[None], queue: deque, entry: object = None) -> None:
        """A waiter cancelled: handed a slot as it was, the slot goes to the next; still
        waiting, it leaves the queue (a dispatch may have taken it off already)."""
        if waiter.done() and not waiter.cancelled():
            self._release()
        else:
            with contextlib.suppress(ValueError):
                queue.remove(waiter if entry is None else entry)
            self._dispatch()  # fewer members owed: a first bind held back may go now

    def _release(self) -> None:
        self._free += 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiters: urgent ones first, then first binds in order while the
        one at the head may open its gang."""
        while self._free > 0:
            while self._urgent and self._urgent[0].done():
                self._urgent.popleft()  # cancelled
            if self._urgent:
                self._free -= 1
                self._urgent.popleft().set_result(None)
                continue
            while self._first and self._first[0][0].done():
                self._first.popleft()
            if not self._first or not self._opens(self._first[0][1]):
                return
            waiter, rest = self._first.popleft()
            self._free -= 1
            self._owed += rest
            waiter.set_result(None)


class Tab:
    """The members one gang in progress still owes (``Slots``): its first bind's rest, from
    that bind's slot until each member's bind is over, all its tries; ``close`` settles what
    is left however the gang's binding ends (a first bind refused, a cancel).

    Owed by the members' own binds instead, the rest was owed by nobody between the first
    bind's release and the members' first tries: the next gang's first bind went in that
    gap, and its members waited behind all of this one's (a gang of 120 partly bound for
    5.2 s behind a gang of 256 at 1,000 nodes, the latency step of make bench-curve)."""

    def __init__(self, slots: Slots) -> None:
        self._slots = slots
        self.owed = 0

    def pay(self, members: int = 1) -> None:
        members = min(members, self.owed)
        if members > 0:
            self.owed -= members
            self._slots._settle(members)

    def close(self) -> None:
        self.pay(self.owed)


def _subject(group: GroupBinding) -> str:
    if len(group.keys) == 1:
        return f"gang {group.keys[0]}"
    return f"GangGroup [{', '.join(map(str, group.keys))}]"


class Binder:
    def __init__(
        self,
        api: ApiClient,
        cache: ClusterCache,
        recorder: EventRecorder,
        *,
        config: Config,
        metrics: Metrics,
        concurrency: int = 32,
        poke: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
        on_bound: Callable[[GangBinding, float], Awaitable[None]] | None = None,
        fence: Callable[[], bool] = lambda: True,
        patience_seconds: float = 30.0,
        remaining: Callable[[], float] = lambda: math.inf,
    ) -> None:
        # How long this replica may still bind (its Lease's time left): a bind not answered
        # by then is dropped, so the API server gives it up rather than commit it after the
        # Lease has lapsed, when the rest of the gang is refused and a new leader decides.
        self._remaining = remaining
        self._api = api
        # How long a member of a gang whose first bind landed keeps trying through errors
        # that may pass (no answer, 429, 5xx), holding its room meanwhile.
        self._patience = patience_seconds
        self._cache = cache
        self._recorder = recorder
        self._config = config
        self._slots = Slots(concurrency)
        self._metrics = metrics
        self._poke = poke
        self._clock = clock
        # Write-back once a topology-placed gang is bound: given the gang and the seconds
        # the pass that placed it took.
        self._on_bound = on_bound
        # True while this replica may bind (it holds the leader Lease, or runs alone).
        self._fence = fence
        self.in_flight = 0
        # Dynamic resource allocation: claims written before a group's first bind.
        self._claims = ClaimWriter(api, cache, fence=fence, on_conflict=metrics.claim_conflicts.inc)
        # Claims waiting for their first consumer: volumes chosen or asked for, then bound.
        # The groups waiting for their volumes (their watches may never show them bound
        # once a shutdown has begun), and whether it has.
        self._waiting_on_volumes: set[asyncio.Task[object]] = set()
        self._stopping = False
        self._volumes = VolumeWriter(
            api,
            cache,
            fence=fence,
            timeout_seconds=config.volume_bind_timeout_seconds,
            manager=config.scheduler_name,
        )

    def stop_waiting(self) -> None:
        """On shutdown: the groups waiting for their volumes stop waiting (what they asked
        for is taken back, their pods are forgotten) rather than wait out
        --volume-bind-timeout on a cache that no watch updates any more; any that had not
        begun to wait never will. Binds in flight are left to finish: a gang half bound
        is worse than a shutdown a few seconds longer."""
        self._stopping = True
        for task in self._waiting_on_volumes:
            task.cancel()

    @property
    def volumes(self) -> VolumeWriter:
        return self._volumes

    def assume(self, group: GroupBinding) -> None:
        """Count the pods against their nodes (and the devices of their claims) now; called
        by the loop before any await."""
        for binding in group.bindings:
            self._cache.assume(binding.pod, binding.node, by=self._config.scheduler_name)
        if group.claims:
            self._cache.assume_claims(group.claims)
        if group.volumes:
            self._cache.assume_volumes(group.volumes)

    async def apply(
        self, group: GroupBinding, *, decided: asyncio.Future[float] | None = None
    ) -> None:
        """Bind the group; never raises. Whatever goes wrong, nothing stays assumed that was
        not bound: an exception of ours, or a cancellation (the Lease lost, a shutdown),
        forgets every binding not known to have landed.

        ``decided``: the seconds of the pass that made the group, once that pass's memory is
        in the cache. A group is handed over as soon as the pass commits it, so its binds go
        out while the pass runs; what follows them and reads or writes the gang's memory (a
        rejected first bind's backoff, the bound gang's metrics) waits for it, or the pass's
        memory would come after and miss it. None: decided already (0 s)."""
        bound: set[Binding] = set()
        written: list[Written] = []
        try:
            await self._apply(group, bound, written, decided=decided)
        except asyncio.CancelledError:
            self._forget_unbound(group, bound)
            raise
        except Exception:
            log.exception("binding a GangGroup failed unexpectedly; its pods go again")
            self._metrics.background_errors.labels(worker="binder").inc()
            self._forget_unbound(group, bound)
            await self._claims.release(written, self._unbound(group, bound))

    def _unbound(self, group: GroupBinding, bound: set[Binding]) -> list[PodRef]:
        return [b.pod for b in group.bindings if b not in bound]

    async def _take_back_claims(self, group: GroupBinding, written: list[Written]) -> None:
        """Release what landed of a group's claim writes, and forget the assumption of
        those released (or never written). A write that may have landed and could not be
        released stays assumed: its devices may be allocated in the API server, and must
        not go to another claim; the watch clears it once it shows the claim."""
        unreleased = await self._claims.release(written, patience=self._patience)
        kept = {id(entry.write) for entry in unreleased}
        self._cache.forget_claims(w for w in group.claims if id(w) not in kept)
        self._cache.unsure_claims(entry.write for entry in unreleased)

    def _forget_unbound(self, group: GroupBinding, bound: set[Binding]) -> None:
        for binding in group.bindings:
            if binding not in bound:
                self._cache.forget(binding.pod)
        if group.claims:
            # What landed of them shows in the watch; a reservation left for a pod that is
            # not bound is taken back by the sweep (``ClaimWriter``'s caller).
            self._cache.forget_claims(group.claims)
        if group.volumes:
            self._cache.forget_volumes(group.volumes)
        self._poke()

    async def _apply(
        self,
        group: GroupBinding,
        bound: set[Binding],
        written: list[Written],
        *,
        decided: asyncio.Future[float] | None,
    ) -> None:
        async def pass_seconds() -> float:
            return 0.0 if decided is None else await asyncio.shield(decided)

        bindings = group.bindings
        if not bindings:
            return
        failed: set[Binding] = set()
        if group.volumes and (error := await self._bind_volumes(group)):
            # Its claims were never written: their devices are free again.
            self._cache.forget_claims(group.claims)
            await pass_seconds()
            self._group_failed(group, f"{error}; nothing of {_subject(group)} was bound")
            return
        if group.claims:
            # Claims first, as kube-scheduler's PreBind: a pod bound before its claims are
            # allocated and reserved would start without its devices.
            landed, error = await self._claims.write(group.claims)
            written.extend(landed)
            self._metrics.claim_writes.inc(len(landed))
            if error:
                await self._take_back_claims(group, written)
                await pass_seconds()
                self._group_failed(group, f"{error}; nothing of {_subject(group)} was bound")
                return
        tab = self._slots.tab()
        try:
            if group.all_or_nothing:
                first, rest = bindings[0], bindings[1:]
                error = await self._bind(first, rest=len(rest), tab=tab)
                if error is not None:
                    tab.close()
                    if written:
                        await self._take_back_claims(group, written)
                    await pass_seconds()
                    self._first_bind_failed(group, error)
                    return
                bound.add(first)
                bindings = rest
            # Past the first bind the gang is (being) satisfied: a member that fails for a
            # reason that may pass keeps its room and tries again, or the gang could end half
            # bound with its room taken by others (when the API server restarts, say).
            results = await asyncio.gather(
                *(self._member(b, tab=tab, urgent=group.all_or_nothing) for b in bindings)
            )
        finally:
            tab.close()
        for binding, error in zip(bindings, results, strict=True):
            if error is not None:
                failed.add(binding)
                self._forget(binding, f"binding {binding.pod} to {binding.node} failed: {error}")
            else:
                bound.add(binding)
        if failed and written:  # their reservations go, as kube-scheduler's Unreserve
            await self._claims.release(written, [b.pod for b in failed])
        seconds = await pass_seconds()
        if failed:
            self._back_off(gang for gang in group.gangs if failed.intersection(gang.bindings))
        if not group.all_or_nothing:
            await self._write_ranks(group, bound, seconds)
            return
        await self._gangs_bound(group, failed, seconds)

    async def _bind_volumes(self, group: GroupBinding) -> str:
        """Volumes first, as kube-scheduler's PreBind (VolumeBinding before
        DynamicResources): every claim of the group bound before any pod is. "" once they
        are; else why not, with what landed taken back and forgotten."""
        started = time.monotonic()
        landed: list[VolumeWrite] = []
        nodes = {b.pod: b.node for b in group.bindings}
        waiting = asyncio.current_task()
        assert waiting is not None  # always run in a task of the loop's
        try:
            if self._stopping:
                raise asyncio.CancelledError
            self._waiting_on_volumes.add(waiting)
            error = await self._volumes.bind(group.volumes, nodes=nodes, landed=landed)
        except asyncio.CancelledError:
            # A shutdown while this replica leads: what it asked for is taken back (briefly:
            # the shutdown waits), so that no claim is left asked for on a node the gang
            # may not get.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._volumes.take_back(landed), TAKE_BACK_SECONDS)
            raise
        finally:
            self._waiting_on_volumes.discard(waiting)
        self._metrics.volume_binding_seconds.labels(outcome="failed" if error else "bound").observe(
            time.monotonic() - started
        )
        if error:
            await self._volumes.take_back(landed)
            self._cache.forget_volumes(group.volumes)
        return error

    async def _gangs_bound(self, group: GroupBinding, failed: set[Binding], seconds: float) -> None:
        """Each gang of the group bound whole: its bind latency measured, its placement
        written back."""
        for gang_binding in group.gangs:
            if any(b in failed for b in gang_binding.bindings):
                continue  # a member goes again as an ordinary pod: the placement is stale
            state = self._cache.memory.get(gang_binding.gang, GangState())
            if state.first_attempt is not None:
                self._metrics.gang_bound_seconds.observe(
                    max(self._clock() - state.first_attempt, 0.0)
                )
            if state.nominated_at is not None:
                self._metrics.preemption_bound_seconds.observe(
                    max(self._clock() - state.nominated_at, 0.0)
                )
            if gang_binding.placement is not None and self._on_bound is not None:
                await self._on_bound(gang_binding, seconds)

    async def _write_ranks(self, group: GroupBinding, bound: set[Binding], seconds: float) -> None:
        """Members placed one by one (a healed one) get their rank labels too, those that
        landed, as the members of a gang placed whole do."""
        if self._on_bound is None:
            return
        for gang_binding in group.gangs:
            placement = gang_binding.placement
            if placement is None:
                continue
            landed = {b.pod for b in gang_binding.bindings if b in bound}
            ranks = tuple((ref, rank) for ref, rank in placement.ranks if ref in landed)
            if ranks:
                written = replace(gang_binding, placement=replace(placement, ranks=ranks))
                await self._on_bound(written, seconds)

    async def _member(self, binding: Binding, *, tab: Tab, urgent: bool) -> str | None:
        """A member's bind after its gang's first (or any pod's of a group that is not all or
        nothing); it stops being owed on the gang's tab once all its tries are over."""
        try:
            return await self._bind(binding, patient=True, urgent=urgent, tab=tab)
        finally:
            tab.pay()

    async def _bind(
        self,
        binding: Binding,
        *,
        patient: bool = False,
        urgent: bool = False,
        rest: int = 0,
        tab: Tab | None = None,
    ) -> str | None:
        """Bind one pod; None on success, else what went wrong. ``patient``: errors that
        may pass are retried with backoff for up to ``patience_seconds``; ``urgent``: the
        pod's gang has a member bound, it goes before other gangs' first binds; ``rest``: a
        gang's first bind, with that many members to follow (``Slots``); ``tab``: the gang's,
        on which its rest is owed (``Tab``)."""
        deadline = time.monotonic() + self._patience
        attempt = 0
        while True:
            failure, transient = await self._bind_once(binding, urgent=urgent, rest=rest, tab=tab)
            if failure is None:
                return None
            attempt += 1
            if not patient or not transient or time.monotonic() >= deadline:
                return failure
            log.info("bind failed; trying again", pod=str(binding.pod), error=failure)
            await asyncio.sleep(min(0.2 * 2 ** (attempt - 1), 5.0) * random.uniform(0.8, 1.2))

    async def _bind_once(
        self, binding: Binding, *, urgent: bool, rest: int = 0, tab: Tab | None = None
    ) -> tuple[str | None, bool]:
        """One bind request: (None, _) on success, else (what went wrong, whether it may
        pass if tried again)."""
        ref = binding.pod
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
                # The API server copies a Binding's annotations onto the pod, in the same
                # write that binds it: no request more.
                "annotations": {names.BOUND_BY: self._config.scheduler_name},
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": binding.node},
        }
        self.in_flight += 1
        started = time.perf_counter()
        failure: str | None = None
        unsure = False  # the request may have landed although no answer came back
        transient = False
        conflict = False
        try:
            async with self._slots.held(urgent=urgent, rest=rest, tab=tab):
                # Fencing: checked after the wait for a slot, right before the request. A
                # replica that is not sure it still holds the Lease sends nothing.
                if not self._fence():
                    failure = "this replica no longer holds the leader Lease; nothing sent"
                else:
                    left = self._remaining()
                    async with asyncio.timeout(left if math.isfinite(left) else None):
                        await self._api.post(
                            f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}/binding", body
                        )
        except ApiError as error:
            # 409: the pod is bound already, maybe by an earlier try of ours whose answer
            # was lost: on this very node, that is success.
            failure, unsure = error.message or error.reason, error.unsure or error.status == 409
            transient = error.transient
            conflict = error.status == 409
        except Exception as error:  # a bug of ours or of a library: the bind may have gone
            failure, unsure = f"{type(error).__name__}: {error}", True
        finally:
            self.in_flight -= 1
            self._metrics.bind_seconds.observe(time.perf_counter() - started)
        if unsure:
            landed, unbound = await self._landed(binding)
            if landed:
                failure = None  # it did land: forgetting it would leave a gang half bound
            elif conflict and unbound:
                # The binding storage answers 409 for any failed update, etcd unavailable
                # included ("Operation cannot be fulfilled on pods/binding ...: rpc error:
                # code = Unavailable"): a pod still on no node met no rival, and may be
                # bound if tried again; forgotten, its room goes to other gangs.
                transient = True
        if failure is not None:
            self._metrics.bind_errors.inc()
            return failure, transient
        self._recorder.emit(
            Event(
                ObjectRef("Pod", ref.namespace, ref.name, ref.uid),
                NORMAL,
                "Scheduled",
                f"Successfully assigned {ref} to {binding.node}",
            )
        )
        return None, False

    async def _landed(self, binding: Binding) -> tuple[bool, bool]:
        """Whether the pod is bound to the node after all, and whether it still waits for a
        node (the same pod, on none, not being deleted). Asked until the API server
        answers, for up to ``patience_seconds``: a bind that landed but is taken for failed
        frees its room in the cache while the pod holds it, and the next pass fills it
        (an API server restart can cut the answer to a bind that landed; the pod's node would
        then take a gang beside it). Only past that is no answer a no (the room is the pass's
        again; the watch shows the truth when it comes back)."""
        ref = binding.pod
        deadline = time.monotonic() + self._patience
        attempt = 0
        while True:
            try:
                pod = await self._api.request(
                    "GET", f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}"
                )
                break
            except ApiError as error:
                if error.status == 404:
                    return False, False  # the pod is gone: bound or not, it holds nothing
                if time.monotonic() >= deadline:
                    return False, False
            except Exception:  # a bug of ours or of a library: the check cannot be made
                return False, False
            attempt += 1
            await asyncio.sleep(min(0.2 * 2 ** (attempt - 1), 2.0))
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        same = not ref.uid or meta.get("uid") == ref.uid
        node = spec.get("nodeName")
        # A pod being deleted is refused for good (409 "is being deleted"): not worth a retry.
        waiting = same and not node and not meta.get("deletionTimestamp")
        return same and node == binding.node, waiting

    def _forget(self, binding: Binding, message: str) -> None:
        log.warning(
            "bind failed; the pod will be placed again", pod=str(binding.pod), error=message
        )
        self._cache.forget(binding.pod)
        self._poke()

    def _back_off(self, gangs: Iterable[GangBinding]) -> None:
        """Members whose bind failed are placed again, but not at once: while the API server
        is away every bind fails at once, and a pass per failure would spin."""
        retry_at = self._clock() + self._config.initial_backoff_seconds
        for gang in gangs:
            state = self._cache.memory.get(gang.gang, GangState())
            if state.retry_at < retry_at:
                self._cache.update_memory(gang.gang, replace(state, retry_at=retry_at))

    def _first_bind_failed(self, group: GroupBinding, error: str) -> None:
        first = group.bindings[0]
        self._group_failed(
            group,
            f"binding {first.pod} to {first.node} was rejected ({error}); nothing of "
            f"{_subject(group)} was bound",
        )

    def _group_failed(self, group: GroupBinding, what: str) -> None:
        message = f"{what}, and it will be tried again whole"
        log.warning("gang bind rejected", gang=", ".join(map(str, group.keys)), error=what)
        for binding in group.bindings:
            self._cache.forget(binding.pod)
        for key in group.keys:
            state = self._cache.memory.get(key, GangState())
            self._cache.update_memory(
                key,
                after_failed_bind(state, message=message, now=self._clock(), config=self._config),
            )
        for binding in group.bindings:
            ref = binding.pod
            event = Event(
                ObjectRef("Pod", ref.namespace, ref.name, ref.uid),
                WARNING,
                "FailedScheduling",
                message,
            )
            self._recorder.emit(event)
        self._poke()
