"""The label-selected ConfigMap watch against a real API server: what it sees, and that an
object whose label is removed is reported deleted."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from e2e.fixtures import Cluster
from scheduler.shell.api import ApiClient, load_credentials
from scheduler.shell.watching import LabelWatch

pytestmark = pytest.mark.cluster


def configmap(cluster: Cluster, name: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": labels},
        "data": {"k": "v"},
    }


async def _watch_while(cluster: Cluster, seen: list[tuple[str, str]]) -> None:
    api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
    label = "test.gang-scheduler.io/watched"

    def record(kind: str, obj: dict) -> None:
        seen.append((kind, obj["metadata"]["name"]))

    async def until(expected: tuple[str, str]) -> None:
        async with asyncio.timeout(20):
            while expected not in seen:
                await asyncio.sleep(0.05)

    cluster.apply(configmap(cluster, "before", {label: ""}), configmap(cluster, "other", {}))
    task = asyncio.create_task(
        LabelWatch(
            api,
            path=f"/api/v1/namespaces/{cluster.namespace}/configmaps",
            selector=label,
            on_event=record,
        ).run()
    )
    try:
        await until(("ADDED", "before"))
        cluster.apply(configmap(cluster, "after", {label: ""}))
        await until(("ADDED", "after"))
        cluster.access.kubectl("label", "configmap", "before", f"{label}-", "-n", cluster.namespace)
        await until(("DELETED", "before"))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


def test_watch_sees_labelled_configmaps_only_and_a_removed_label_as_deleted(
    cluster: Cluster,
) -> None:
    seen: list[tuple[str, str]] = []
    asyncio.run(_watch_while(cluster, seen))
    assert ("ADDED", "before") in seen
    assert ("ADDED", "after") in seen
    assert ("DELETED", "before") in seen
    assert all(name != "other" for _, name in seen)
