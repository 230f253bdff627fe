"""``gang-scheduler explain`` and ``top``: a fresh snapshot from the API server, explained by
the core."""

from __future__ import annotations

import time

from scheduler.core.explaining import (
    eta_lines,
    explain,
    explain_cluster,
    top_lines,
    waiting_gangs,
)
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import Snapshot
from scheduler.shell.api import Credentials
from scheduler.shell.snapshotting import fold, take


async def explain_gang(
    credentials: Credentials,
    key: GangKey | None,
    *,
    config: Config,
    topology_namespace: str = "gang-scheduler-system",
    cluster: bool = False,
    eta: bool = False,
) -> list[str]:
    """What ``explain`` says of a gang (``key``), with ``eta`` when it is expected to start,
    and with ``cluster`` of the cluster's free room, computed on a fresh LIST of
    everything."""
    snapshot = await cluster_snapshot(
        credentials, config=config, topology_namespace=topology_namespace
    )
    now = time.time()
    said = explain(snapshot, key, now=now, config=config) if key is not None else []
    if eta and key is not None:
        said += eta_lines(snapshot, key, now=now, config=config)
    return [*said, *(explain_cluster(snapshot, config=config) if cluster else [])]


async def top(
    credentials: Credentials,
    *,
    config: Config,
    topology_namespace: str = "gang-scheduler-system",
    forecasting: bool = False,
) -> list[str]:
    """``kubectl gang top``: every gang with members waiting, with its queue, how long
    it has waited, with ``forecasting`` when it is expected to start, and why; the longest
    waiting first."""
    snapshot = await cluster_snapshot(
        credentials, config=config, topology_namespace=topology_namespace
    )
    now = time.time()
    rows = waiting_gangs(snapshot, now=now, config=config, forecasting=forecasting)
    return top_lines(rows, now=now)


async def cluster_snapshot(
    credentials: Credentials, *, config: Config, topology_namespace: str
) -> Snapshot:
    """The cluster as the scheduler's cache would hold it, from a fresh LIST of every kind
    it watches (no informers: one look), folded as ``gang-scheduler snapshot`` folds it."""
    document = await take(credentials, topology_namespace=topology_namespace, readable_only=True)
    return fold(document, config=config).snapshot(whole=True)
