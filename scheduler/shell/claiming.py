"""Writing a group's ResourceClaim allocations and reservations before its first bind, and
taking them back if the group does not bind (kube-scheduler's PreBind and Unreserve of the
DynamicResources plugin, for a whole GangGroup).

Each claim is written as kube-scheduler writes it: the ``resource.kubernetes.io/
delete-protection`` finalizer first (the ResourceClaim controller clears an allocation only
from claims that carry it), then ``status.allocation`` and ``status.reservedFor`` in one
status write, both conditional on the claim's resourceVersion. A claim that changed since
the pass saw it is read again: if someone else allocated it meanwhile, the group is not
bound (the devices planned may be another's now) and goes again after a backoff.

A pod's extended resources that devices serve get a claim made for them first (KEP-5004, as
kube-scheduler's PreBind makes it): named by the API server from ``<pod>-extended-resources-``,
owned by the pod, annotated, with the finalizer; then its allocation and reservation as any
claim's; then the pod's ``status.extendedResourceClaimStatus``. Taking it back deletes it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.devices import (
    allocation_to_dict,
    device_request_to_dict,
    resource_claim_from_dict,
)
from scheduler.model.decisions import ClaimWrite
from scheduler.model.devices import (
    EXTENDED_CLAIM_ANNOTATION,
    FINALIZER,
    Consumer,
    DeviceId,
    ResourceClaim,
)
from scheduler.model.pods import PodRef
from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()

# Conflicts tried through (reading the claim again) before the group gives up.
ATTEMPTS = 3


def claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


def pod_status_path(ref: PodRef) -> str:
    return f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}/status"


def _consumers(entries: Iterable[Consumer]) -> list[dict[str, str]]:
    return [
        {
            **({"apiGroup": c.api_group} if c.api_group else {}),
            "resource": c.resource,
            "name": c.name,
            "uid": c.uid,
        }
        for c in entries
    ]


@dataclass
class Written:
    """What landed of one ClaimWrite: whether this scheduler allocated the claim (and
    added its finalizer), and the pods reserved."""

    write: ClaimWrite
    allocated: bool = False
    finalized: bool = False
    pods: list[PodRef] = field(default_factory=list)
    # The PodGroups this write reserved the claim for (a group's reservation is taken back
    # only with the last of the write's pods, and only if this write added it).
    groups_added: list[Consumer] = field(default_factory=list)
    # The name the API server gave a claim made here ("" if none was made, or the create
    # got no answer: then the sweep of leftovers finds it by its owner).
    made: str = ""


class ClaimWriter:
    def __init__(
        self,
        api: ApiClient,
        cache: ClusterCache,
        *,
        fence: Callable[[], bool] = lambda: True,
        on_conflict: Callable[[], None] = lambda: None,
    ) -> None:
        self._api = api
        self._cache = cache
        self._fence = fence
        self._on_conflict = on_conflict

    async def write(self, writes: Iterable[ClaimWrite]) -> tuple[list[Written], str]:
        """Write every claim; stops at the first that fails. Returns what landed and what
        went wrong ("" if nothing)."""
        done: list[Written] = []
        for write in writes:
            written = Written(write)
            error = await (self._make_one(written) if write.made_here else self._write_one(written))
            if written.allocated or written.finalized or written.pods or written.made:
                done.append(written)
            if error:
                return done, error
        return done, ""

    async def _make_one(self, written: Written) -> str:
        """Make the claim for a pod's extended resources, allocated and reserved for it, and
        name it in the pod's status."""
        write = written.write
        pod = write.pods[0]
        where = f"the ResourceClaim for the extended resources of pod {pod.namespace}/{pod.name}"
        if not self._fence():
            return "this replica no longer holds the leader Lease; nothing sent"
        if write.allocation is None:
            return f"{where} has no allocation planned (a bug: please report it)"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{pod.name}-extended-resources-",
                "namespace": pod.namespace,
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "finalizers": [FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.name,
                        "uid": pod.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {"devices": {"requests": [device_request_to_dict(r) for r in write.requests]}},
        }
        try:
            made = await self._api.post(
                f"/apis/resource.k8s.io/v1/namespaces/{pod.namespace}/resourceclaims", body
            )
        except ApiError as error:
            return f"creating {where} failed: {error}"
        meta = made.get("metadata") or {}
        written.made, written.finalized = str(meta.get("name", "")), True
        path = claim_path(pod.namespace, written.made)
        try:
            status = {
                "allocation": allocation_to_dict(write.allocation),
                "reservedFor": _consumers([Consumer("pods", pod.name, pod.uid)]),
            }
            await self._api.merge_patch(
                f"{path}/status",
                {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": status},
            )
            written.allocated, written.pods = True, [pod]
            mappings = [
                {"containerName": c, "resourceName": r, "requestName": q}
                for c, r, q in write.mappings
            ]
            await self._api.merge_patch(
                pod_status_path(pod),
                {
                    "metadata": {"uid": pod.uid},
                    "status": {
                        "extendedResourceClaimStatus": {
                            "requestMappings": mappings,
                            "resourceClaimName": written.made,
                        }
                    },
                },
            )
        except ApiError as error:
            if error.unsure:
                written.allocated, written.pods = True, [pod]
            return f"writing {where} ({written.made}) failed: {error}"
        return ""

    async def _claim(self, write: ClaimWrite, *, fresh: bool) -> ResourceClaim | None:
        if not fresh:
            known = self._cache.resource_claim(write.namespace, write.name)
            if known is not None and known.resource_version == write.resource_version:
                return known
        body = await self._api.request("GET", claim_path(write.namespace, write.name))
        return resource_claim_from_dict(body)

    async def _write_one(self, written: Written) -> str:
        write = written.write
        where = f"ResourceClaim {write.namespace}/{write.name}"
        path = claim_path(write.namespace, write.name)
        fresh = False
        for _ in range(ATTEMPTS):
            if not self._fence():
                return "this replica no longer holds the leader Lease; nothing sent"
            try:
                claim = await self._claim(write, fresh=fresh)
            except ApiError as error:
                return f"reading {where} failed: {error}"
            fresh = True
            if claim is None or (write.uid and claim.uid != write.uid):
                return f"{where} is gone (or was made anew) since it was planned"
            if claim.deleting:
                return f"claim {write.namespace}/{write.name} got deleted in the meantime"
            allocation = write.allocation
            if claim.allocation is not None:
                if allocation is not None and claim.allocation.devices != allocation.devices:
                    self._on_conflict()
                    return f"claim {claim.namespace}/{claim.name} got allocated elsewhere meanwhile"
                allocation = None  # it shows ours (written by now, or before): reserve only
            elif allocation is None:
                return f"{where} has no allocation to reserve (a bug: please report it)"
            version = claim.resource_version
            # A PodGroup that shares the claim takes one entry for all its members.
            groups = [g for g in write.groups if not claim.reserved_for_group(g)]
            try:
                if allocation is not None and FINALIZER not in claim.finalizers:
                    body = await self._api.merge_patch(
                        path,
                        {
                            "metadata": {
                                "resourceVersion": version,
                                "finalizers": [*claim.finalizers, FINALIZER],
                            }
                        },
                    )
                    written.finalized = True
                    version = (body.get("metadata") or {}).get("resourceVersion", version)
                new = [
                    ref
                    for ref in write.pods
                    if ref.uid not in write.grouped and not claim.reserved_for_pod(ref.uid)
                ]
                adding = [*groups, *(Consumer("pods", r.name, r.uid) for r in new)]
                status: dict[str, Any] = {"reservedFor": _consumers([*claim.reserved_for, *adding])}
                if allocation is not None:
                    status["allocation"] = allocation_to_dict(allocation)
                if adding or allocation is not None:
                    await self._api.merge_patch(
                        f"{path}/status",
                        {"metadata": {"resourceVersion": version}, "status": status},
                    )
                written.allocated = allocation is not None
                written.pods = list(write.pods)
                written.groups_added = groups
                return ""
            except ApiError as error:
                if error.status == 409:
                    self._on_conflict()
                    continue  # changed since: read it again
                if error.unsure:
                    # No answer: it may have landed. Counted as written, so that taking it
                    # back reads the claim and removes what is there.
                    written.finalized = written.finalized or allocation is not None
                    written.allocated = allocation is not None
                    written.pods = list(write.pods)
                    written.groups_added = groups
                return f"writing the allocation of {where} failed: {error}"
        return f"{where} kept changing while its allocation was written ({ATTEMPTS} conflicts)"

    async def release(
        self,
        written: Iterable[Written],
        pods: Iterable[PodRef] | None = None,
        *,
        patience: float = 0.0,
    ) -> list[Written]:
        """Take back what landed: the reservations of ``pods`` (all of each write's, if
        None), and, where this scheduler allocated a claim that is then reserved for nobody,
        the allocation and the finalizer. A release the API server does not answer is tried
        again for ``patience`` seconds. Returns the writes not released: their allocation
        may stand in the API server, so the caller keeps their devices assumed taken (else
        the next pass gives them to another claim: a device in two claims). Such a claim left
        reserved for a pod that is not bound is released before the first pass of the next
        start or leader (``release_leftover_claims``)."""
        only = None if pods is None else {ref.uid for ref in pods}
        unreleased = []
        for entry in written:
            if entry.made:
                pod = entry.write.pods[0]
                if only is not None and pod.uid not in only:
                    continue
                if await self._delete_made(entry, patience=patience):
                    entry.pods, entry.made = [], ""
                else:
                    unreleased.append(entry)
                continue
            leaving = [r for r in entry.pods if only is None or r.uid in only]
            if not leaving:
                continue
            whole = len(leaving) == len(entry.pods)
            own = [r for r in leaving if r.uid not in entry.write.grouped]
            if not own and not (whole and entry.groups_added):
                # Only members of PodGroups whose reservation stays: while another pod of the
                # write uses it, or when it was there before this write.
                entry.pods = [r for r in entry.pods if r not in leaving]
                continue
            if await self._release_one(
                entry, leaving, groups=entry.groups_added if whole else [], patience=patience
            ):
                entry.pods = [r for r in entry.pods if r not in leaving]
            else:
                unreleased.append(entry)
        return unreleased

    async def _delete_made(self, entry: Written, *, patience: float) -> bool:
        """Delete a claim made here for a pod that is not bound (Unreserve)."""
        namespace = entry.write.namespace
        return await _patiently(
            lambda: delete_claim(self._api, namespace=namespace, name=entry.made),
            patience=patience,
            failed="could not delete a ResourceClaim made for a pod's extended resources; "
            "the next pass names it to be deleted again",
            claim=f"{namespace}/{entry.made}",
        )

    async def _release_one(
        self, entry: Written, leaving: list[PodRef], *, groups: list[Consumer], patience: float
    ) -> bool:
        write = entry.write
        return await _patiently(
            lambda: release_claim(
                self._api,
                namespace=write.namespace,
                name=write.name,
                uids={r.uid for r in leaving},
                groups=groups,
                deallocate=entry.allocated,
                # Only ours: a write that got no answer may not have landed, and the
                # claim may hold someone else's allocation by now.
                devices=write.allocation.devices if write.allocation is not None else None,
            ),
            patience=patience,
            failed="could not release a ResourceClaim; it is released at the next start "
            "or change of leader (release_leftover_claims)",
            claim=f"{write.namespace}/{write.name}",
        )


async def _patiently(
    call: Callable[[], Awaitable[None]], *, patience: float, failed: str, claim: str
) -> bool:
    """``call`` until it succeeds, tried again on a transient failure for ``patience``
    seconds: whether it succeeded (else ``failed`` is logged)."""
    deadline = time.monotonic() + patience
    attempt = 0
    while True:
        try:
            await call()
            return True
        except ApiError as error:
            if not error.transient or time.monotonic() >= deadline:
                log.warning(failed, claim=claim, error=str(error))
                return False
        attempt += 1
        await asyncio.sleep(min(0.2 * 2 ** (attempt - 1), 2.0))


async def release_claim(
    api: ApiClient,
    *,
    namespace: str,
    name: str,
    uids: set[str],
    deallocate: bool,
    devices: tuple[DeviceId, ...] | None = None,
    groups: Iterable[Consumer] = (),
) -> None:
    """Remove the reservations of ``uids`` (and of PodGroups ``groups``) from a claim; with
    ``deallocate``, clear its allocation (and the finalizer) if nobody is left and (given
    ``devices``) it is that allocation. Conflicts are tried through."""
    path = claim_path(namespace, name)
    named = {(g.api_group, g.resource, g.name) for g in groups}
    for _ in range(ATTEMPTS):
        claim = await _read_claim(api, path)
        if claim is None:
            return
        left = [
            c
            for c in claim.reserved_for
            if not (c.is_pod and c.uid in uids) and (c.api_group, c.resource, c.name) not in named
        ]
        clear = (
            deallocate
            and not left
            and claim.allocation is not None
            and (devices is None or claim.allocation.devices == devices)
        )
        if len(left) == len(claim.reserved_for) and not clear:
            break
        status: dict[str, Any] = {"reservedFor": _consumers(left) or None}
        if clear:
            status["allocation"] = None
        try:
            body = await api.merge_patch(
                f"{path}/status",
                {"metadata": {"resourceVersion": claim.resource_version}, "status": status},
            )
        except ApiError as error:
            if error.status == 409:
                continue
            raise
        claim = resource_claim_from_dict(body)
        break
    else:
        return
    if deallocate and claim.allocation is None and FINALIZER in claim.finalizers:
        await api.merge_patch(
            path,
            {
                "metadata": {
                    "resourceVersion": claim.resource_version,
                    "finalizers": [f for f in claim.finalizers if f != FINALIZER],
                }
            },
        )


async def _read_claim(api: ApiClient, path: str) -> ResourceClaim | None:
    """The claim at ``path``; None if it is gone."""
    try:
        return resource_claim_from_dict(await api.request("GET", path))
    except ApiError as error:
        if error.status == 404:
            return None
        raise


async def delete_claim(api: ApiClient, *, namespace: str, name: str) -> None:
    """Delete a claim made for a pod's extended resources: its finalizer first (nothing
    else clears it from a claim whose pod never ran), then the claim; gone is done."""
    path = claim_path(namespace, name)
    for _ in range(ATTEMPTS):
        claim = await _read_claim(api, path)
        if claim is None:
            return
        if FINALIZER not in claim.finalizers:
            break
        try:
            await api.merge_patch(
                path,
                {
                    "metadata": {
                        "resourceVersion": claim.resource_version,
                        "finalizers": [f for f in claim.finalizers if f != FINALIZER],
                    }
                },
            )
            break
        except ApiError as error:
            if error.status == 404:
                return
            if error.status != 409:
                raise
    try:
        await api.request("DELETE", path)
    except ApiError as error:
        if error.status != 404:
            raise


async def release_leftover_claims(
    api: ApiClient, cache: ClusterCache, *, fence: Callable[[], bool] = lambda: True
) -> int:
    """Release what ``ClusterCache.leftover_claims`` finds (before the first pass: nothing
    is in flight then). Failures are logged and left for the next start. How many claims
    were released."""
    released = 0
    for claim in cache.leftover_made_claims():
        if not fence():
            break
        try:
            await delete_claim(api, namespace=claim.namespace, name=claim.name)
        except ApiError as error:
            log.warning(
                "could not delete a claim made for a pod's extended resources, left by an "
                "attempt that did not bind",
                claim=f"{claim.namespace}/{claim.name}",
                error=str(error),
            )
            continue
        log.info(
            "deleted a claim made for a pod's extended resources by an attempt that did not bind",
            claim=f"{claim.namespace}/{claim.name}",
        )
        released += 1
    for claim, uids, groups in cache.leftover_claims():
        if not fence():
            break
        try:
            await release_claim(
                api,
                namespace=claim.namespace,
                name=claim.name,
                uids=set(uids),
                groups=groups,
                deallocate=True,
            )
        except ApiError as error:
            log.warning(
                "could not release a claim left reserved for pods (or a PodGroup) that are "
                "not bound",
                claim=f"{claim.namespace}/{claim.name}",
                error=str(error),
            )
            continue
        log.info(
            "released a claim left reserved for pods (or a PodGroup) that are not bound",
            claim=f"{claim.namespace}/{claim.name}",
            pods=len(uids),
            podgroups=[g.name for g in groups],
        )
        released += 1
    return released
