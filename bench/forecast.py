"""What a forward play (``core.forecasting.forecast``) costs at scale: the pass bench's cluster
(``bench/pass.py``: nodes of 8 GPUs, ten pods a node, GPU pods in running gangs of 8 of ours,
CPU daemons of the default scheduler), its running gangs given expected durations of 10
minutes to 4 hours and start times up to an hour back, and a queue of waiting gangs of 8
whole-node members that can start only as those runs end.

Per tier: the wall seconds of one forecast (both plays), the virtual passes it played, the
seconds a pass, and how many gangs got an estimate or which other state. The play's budget
(``--max-passes``) and resolution are the live defaults to be chosen from these figures.

    python -m bench.forecast
    python -m bench.forecast --tiers 200 --waiting 20
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter

from bench.report import table, write
from scheduler.core.forecasting import forecast
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.forecasts import EtaState
from scheduler.model.times import format_time

# "pass" is a keyword: the pass bench is imported by name.
_pass = importlib.import_module("bench.pass")
GANG, T0, World, cluster, waiting_gangs = (
    _pass.GANG, _pass.T0, _pass.World, _pass.cluster, _pass.waiting_gangs
)  # fmt: skip
SEED = 47
FRAGMENTS = 0  # every node's GPUs taken by running gangs: waiting gangs wait for ends


def _with_runs(running: list[dict], *, pick: random.Random) -> list[dict]:
    """Each running gang of ours gets an expected duration and a start time."""
    planned: dict[str, tuple[int, float]] = {}
    for manifest in running:
        notes = manifest["metadata"]["annotations"]
        gang = notes.get(names.KOORD_NAME)
        if gang is None:
            continue  # a daemon: never ends
        lasts, ago = planned.setdefault(
            gang, (pick.randrange(600, 4 * 3600, 60), pick.uniform(0, 3600))
        )
        notes[names.EXPECTED_DURATION] = f"{lasts}s"
        manifest["status"]["startTime"] = format_time(T0 - ago)
    return running


def tier(nodes: int, *, waiting: int, resolution: float, max_passes: int) -> dict:
    pick = random.Random(SEED)
    node_map, running = cluster(nodes, nodes * 10, FRAGMENTS)
    world = World(node_map)
    world.add(_with_runs(running, pick=pick))
    world.add(waiting_gangs(waiting))
    snapshot = world.cache.snapshot(now=T0, whole=True)
    config = Config(scheduler_name="gang-scheduler", default_timeout_seconds=1e9)
    started = time.perf_counter()
    result = forecast(snapshot, now=T0, config=config, resolution=resolution, max_passes=max_passes)
    seconds = time.perf_counter() - started
    states = Counter(eta.state.value for eta in result.etas.values())
    waits = sorted(
        eta.p50 - T0
        for eta in result.etas.values()
        if eta.state is EtaState.ESTIMATED and eta.p50 is not None
    )
    if len(result.etas) != waiting:
        raise SystemExit(f"{len(result.etas)} ETAs for {waiting} waiting gangs")
    return {
        "nodes": nodes,
        "bound_pods": nodes * 10,
        "waiting_gangs": waiting,
        "seconds": round(seconds, 2),
        "passes": result.passes,
        "ms_per_pass": round(1000 * seconds / max(result.passes, 1), 1),
        "horizon_hours": round((result.horizon - T0) / 3600, 2),
        "states": dict(sorted(states.items())),
        "median_wait_minutes": round(statistics.median(waits) / 60, 1) if waits else None,
    }


def markdown(results: dict) -> str:
    rows = [
        (
            r["nodes"],
            r["waiting_gangs"],
            r["seconds"],
            r["passes"],
            r["ms_per_pass"],
            r["horizon_hours"],
            ", ".join(f"{k} {v}" for k, v in r["states"].items()),
            r["median_wait_minutes"],
        )
        for r in results["tiers"]
    ]
    header = (
        "nodes",
        "waiting gangs of 8",
        "forecast s (both plays)",
        "virtual passes",
        "ms a pass",
        "horizon h",
        "states",
        "median ETA, min",
    )
    lines = [
        "# The forward play's cost (`python -m bench.forecast`)",
        "",
        f"Resolution {results['resolution']:g} s, at most {results['max_passes']} passes a "
        f"play; {results['machine']}, load {results['load_before']:.2f} before the run.",
        "",
        *table(header, rows),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiers", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--waiting", type=int, default=0, help="gangs; 0: nodes / 25")
    parser.add_argument("--resolution", type=float, default=60.0)
    parser.add_argument("--max-passes", type=int, default=1000)
    parser.add_argument("--name", default="forecast")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    tiers = []
    for nodes in args.tiers:
        waiting = args.waiting or max(nodes // 25, 1)
        found = tier(nodes, waiting=waiting, resolution=args.resolution, max_passes=args.max_passes)
        print(found, file=sys.stderr)
        tiers.append(found)
    results = {
        "resolution": args.resolution,
        "max_passes": args.max_passes,
        "gang": GANG,
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cpu, Python {platform.python_version()}"
        ),
        "load_before": load,
        "tiers": tiers,
    }
    write(args.name, results, markdown(results), quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
