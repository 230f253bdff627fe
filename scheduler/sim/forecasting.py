"""``gang-scheduler forecast SNAPSHOT``: the forward play (``core.forecasting``) on a snapshot
file, as a table of the waiting gangs and when each is expected to start; with
``--add-nodes NODE=COUNT``, beside the same play on the cluster with that many more nodes
like NODE ("what if we add 16 nodes?").

The snapshot is folded as ``simulate`` folds it; gangs wait as long as it takes unless they
say otherwise (``SIM_CONFIG``), and the play starts when the snapshot was taken.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scheduler.core.explaining import eta_cell
from scheduler.core.forecasting import forecast
from scheduler.model.forecasts import Eta, Forecast
from scheduler.shell.snapshotting import fold
from scheduler.sim.simulating import SIM_CONFIG, _start_time


def forecast_lines(
    document: Mapping[str, Any], *, adding: tuple[str, int] | None = None, resolution: float
) -> list[str]:
    """The table ``forecast`` prints."""
    now = _start_time(document)
    today = _play(document, now=now, resolution=resolution)
    more = _play(with_nodes(document, *adding), now=now, resolution=resolution) if adding else None
    if not today.etas:
        return ["no gang is waiting"]
    header = ["NAMESPACE", "GANG", "ETA"]
    if adding is not None:
        header.append(f"ETA WITH {adding[1]} MORE {adding[0]}")
    header.append("BEHIND / WHY")
    rows = []
    for key in sorted(today.etas, key=lambda k: (_order(today.etas[k]), k)):
        eta = today.etas[key]
        row = [key.namespace, key.name, eta_cell(eta, now=now)]
        if more is not None:
            other = more.etas.get(key)
            row.append(eta_cell(other, now=now) if other is not None else "-")
        row.append(", ".join(map(str, eta.behind)) if eta.behind else eta.reason)
        rows.append(row)
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header) - 1)]
    return [
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "   "
        + row[-1]
        for row in (header, *rows)
    ]


def with_nodes(document: Mapping[str, Any], like: str, count: int) -> dict[str, Any]:
    """The snapshot with ``count`` copies of node ``like`` under new names (``like-more-1``,
    ...), empty: what the cluster would be with them."""
    doc: dict[str, Any] = copy.deepcopy(dict(document))
    nodes = doc.setdefault("lists", {}).setdefault("nodes", [])
    model = next((n for n in nodes if (n.get("metadata") or {}).get("name") == like), None)
    if model is None:
        names = sorted((n.get("metadata") or {}).get("name", "") for n in nodes)
        raise ValueError(f"no node {like!r} in the snapshot (its nodes: {', '.join(names[:10])})")
    taken = {(n.get("metadata") or {}).get("name") for n in nodes}
    made = 0
    i = 0
    while made < count:
        i += 1
        name = f"{like}-more-{i}"
        if name in taken:
            continue
        node = copy.deepcopy(model)
        node["metadata"]["name"] = name
        labels = node["metadata"].setdefault("labels", {})
        if "kubernetes.io/hostname" in labels:
            labels["kubernetes.io/hostname"] = name
        nodes.append(node)
        made += 1
    return doc


def _play(document: Mapping[str, Any], *, now: float, resolution: float) -> Forecast:
    cache = fold(document, config=SIM_CONFIG)
    snapshot = cache.snapshot(now=now, whole=True)
    return forecast(snapshot, now=now, config=SIM_CONFIG, resolution=resolution)


def _order(eta: Eta) -> float:
    return eta.p50 if eta.p50 is not None else float("inf")
