"""The device requests of the claim a scheduler makes for a pod's extended resources that
devices serve (KEP-5004): kube-scheduler's ``createRequestsAndMappings``, ported with its
test cases (``tests/unit/test_extended_resources.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.model.devices import EXACT_COUNT, DeviceRequest, SubRequest
from scheduler.model.pods import ContainerAsk


def extended_requests(
    asks: Sequence[ContainerAsk], resources: Mapping[str, str]
) -> tuple[tuple[DeviceRequest, ...], tuple[tuple[str, str, str], ...]]:
    """The device requests and mappings of the claim for ``resources`` (each by the class
    that serves it), as kube-scheduler makes them (``createRequestsAndMappings``): a request
    per container and resource, named after both; an init container that ends before the
    others start reuses the devices of the containers after it, and the init containers
    share one request, the largest."""
    requests: list[DeviceRequest] = []
    mappings: list[tuple[str, str, str]] = []
    for resource in sorted(resources):
        device_class = resources[resource]
        long_lived: dict[int, DeviceRequest] = {}
        long_mappings: list[tuple[str, str, str]] = []
        for ask in asks:
            if not ask.short_lived:
                request, found = _container_request(ask, resource, device_class, ())
                if request is not None:
                    long_lived[ask.index] = request
                long_mappings += found
        largest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_mappings: list[tuple[str, str, str]] = []
        for ask in asks:
            if ask.short_lived:
                reusable = [r for i, r in sorted(long_lived.items()) if i >= ask.index]
                request, found = _container_request(ask, resource, device_class, reusable)
                if request is not None:
                    short_names.add(request.name)
                    if largest is None or _count(largest) < _count(request):
                        largest = request
                short_mappings += found
        if largest is not None and len(short_names) > 1:
            short_mappings = [
                (c, r, largest.name if name in short_names else name)
                for c, r, name in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests += [long_lived[i] for i in sorted(long_lived)]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda r: r.name)
    return tuple(requests), tuple(mappings)


def _count(request: DeviceRequest) -> int:
    return request.exactly.count if request.exactly is not None else 0


def _container_request(
    ask: ContainerAsk, resource: str, device_class: str, reusable: Sequence[DeviceRequest]
) -> tuple[DeviceRequest | None, list[tuple[str, str, str]]]:
    wanted = dict(ask.asks).get(resource, 0)
    if wanted <= 0:
        return None, []
    mappings: list[tuple[str, str, str]] = []
    have = 0
    for other in reusable:
        have += _count(other)
        mappings.append((ask.name, resource, other.name))
        if have >= wanted:
            return None, mappings
    name = f"container-{ask.index}-request-{ask.keys.index(resource)}"
    sub = SubRequest(name, device_class, mode=EXACT_COUNT, count=wanted - have)
    mappings.append((ask.name, resource, name))
    return DeviceRequest(name, exactly=sub), mappings
