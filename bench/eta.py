"""How right the forward play's expected starts are (#47): the simulator plays a trace and,
every so often, a forecast from the pass's snapshot; each gang that had to wait keeps its
first estimate, set against the start it got (``simulate --forecast-every``). Every job's
real duration is known to the play: what it cannot know is what arrives after it.

Two workloads: simcheck's (16 nodes of 8 GPUs, 291 gangs over 180 s, runs of 2 to 60 s, the
trace whose play the real scheduler matches: ``bench/results/simcheck.md``), forecasts every
5 s at a resolution of 1 s; and a generated day (8 nodes of 8 GPUs, 40 jobs an hour, runs of a
median 20 minutes), forecasts every 10 minutes at a resolution of 60 s. Each with no hold,
hold-head and reserve; for the reservations made (``Reservations``), how many gangs started
later than theirs said, and how many of those behind a gang that started on the reserved
nodes after the reservation (a backfill that may have pushed it back).

    python -m bench.eta
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.report import RESULTS, table, write
from scheduler.sim import traces
from scheduler.sim.reporting import eta_errors, summary
from scheduler.sim.simulating import SIM_CONFIG, Played, Setup, simulate

SIMCHECK = RESULTS / "simcheck"


def with_reserve(actions: Sequence[str]) -> tuple[str, ...]:
    """The actions with reservations (reserve, from the forecasts) in hold-head's place: a
    head gang's room held from when the play says it frees, and only runs expected to end
    by then let onto it."""
    return tuple("reserve" if a == "hold-head" else a for a in actions)


# Each workload three times: with no hold at all, as the scheduler runs by default
# (hold-head after 300 s of waiting), and with reservations (reserve, from the forecasts,
# at once).
SETUPS = (
    (
        "no hold",
        replace(SIM_CONFIG, actions=tuple(a for a in SIM_CONFIG.actions if a != "hold-head")),
    ),
    ("hold-head", SIM_CONFIG),
    ("reserve", replace(SIM_CONFIG, actions=with_reserve(SIM_CONFIG.actions))),
)


@dataclass
class Reservations:
    """What ``observe`` sees of reservations: each gang's first (a ``head_target`` in the
    pass's memory, with the estimate of the forecast the pass read), and every gang's run
    (its nodes, its start, its end), to tell whether a gang that started on a reservation's
    nodes after it was made still ran there when the reservation was due."""

    made: dict[str, tuple[float, float, frozenset[str]]] = field(default_factory=dict)
    runs: list[tuple[str, frozenset[str], float, float]] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    backfilled: set[str] = field(default_factory=set)  # said so (a Backfilled Event)

    def __call__(self, played: Played) -> None:
        etas = played.forecast.etas if played.forecast is not None else {}
        for key, state in played.result.memory.items():
            eta = etas.get(key)
            if not state.head_target or key.name in self.made or eta is None or eta.p50 is None:
                continue
            nodes = frozenset(state.head_target.values())
            self.made[key.name] = (played.t, eta.p50 - played.t0, nodes)
        for event in played.result.events:
            if event.reason == "Backfilled":
                self.backfilled.add(event.message.split()[1].split("/")[-1])
        for group in played.result.bindings:
            for placed in group.gangs:
                job = played.job_of.get(placed.gang.name)
                if job is None or placed.gang.name in self.started:
                    continue
                self.started[placed.gang.name] = played.t
                nodes = frozenset(b.node for b in placed.bindings)
                self.runs.append((placed.gang.name, nodes, played.t, played.t + job.duration))

    def figures(self, *, slack: float) -> dict[str, int]:
        """How many reservations were made; how many gangs started later than their
        reservation said (``slack`` allowed: the plays' resolution); and how many of those
        had a gang started on their nodes since the reservation still running at its due
        time, and how many behind such a gang that backfilled (admitted onto the reserved
        room as expected to end before: the target is none)."""
        late = overlapped = behind_backfill = 0
        for gang, (made, due, nodes) in self.made.items():
            started = self.started.get(gang)
            if started is None or started <= due + slack:
                continue
            late += 1
            behind = {
                other
                for other, on, start, end in self.runs
                if other != gang and on & nodes and made <= start < due and end > due + slack
            }
            overlapped += bool(behind)
            behind_backfill += bool(behind & self.backfilled)
        return {
            "reservations": len(self.made),
            "started after their reservation's start": late,
            "of them behind a gang started since on its nodes": overlapped,
            "of them behind a backfilled gang": behind_backfill,
        }


def _node(i: int) -> dict:
    return {
        "metadata": {"name": f"gpu-{i:03d}", "labels": {"kubernetes.io/hostname": f"gpu-{i:03d}"}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _cluster(nodes: int) -> dict:
    return {
        "apiVersion": "gang-scheduler.io/v1",
        "kind": "ClusterSnapshot",
        "metadata": {"takenAt": "2026-01-01T00:00:00Z"},
        "unserved": [],
        "lists": {"nodes": [_node(i) for i in range(nodes)]},
    }


def workloads(*, short: bool) -> list[tuple[str, dict, list, float, float]]:
    """(name, snapshot, jobs, forecast every, resolution)."""
    snapshot = json.loads(Path(f"{SIMCHECK}.snapshot.json").read_text())
    jobs = traces.read(f"{SIMCHECK}.trace.jsonl")
    day = traces.Shape(hours=2 if short else 24, jobs_per_hour=40)
    return [
        ("simcheck trace, 16 nodes", snapshot, jobs, 5.0, 1.0),
        (
            f"generated {day.hours:g} h, 8 nodes",
            _cluster(8),
            traces.generate(seed=47, shape=day),
            600.0,
            60.0,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="a 2-hour day (a smoke)")
    parser.add_argument("--name", default="eta-accuracy")
    args = parser.parse_args(argv)
    rows, results = [], []
    for name, snapshot, jobs, every, resolution in workloads(short=args.short):
        for setup, config in SETUPS:
            started = time.perf_counter()
            reservations = Reservations()
            run = simulate(
                snapshot, jobs, setup=Setup(name=setup, config=config),
                step=1.0 if every < 60 else 5.0,
                forecast_every=every, forecast_resolution=resolution, observe=reservations,
            )  # fmt: skip
            found = eta_errors(run)
            found.update(reservations.figures(slack=resolution))
            waits = summary(run)
            found["gang wait p50 (s)"] = waits["gang wait p50 (s)"]
            found["gang wait p99 (s)"] = waits["gang wait p99 (s)"]
            found["wall s"] = round(time.perf_counter() - started, 1)
            print(name, setup, found, file=sys.stderr)
            results.append({"workload": name, "setup": setup, "forecast_every": every,
                            "resolution": resolution, "jobs": len(jobs), **found})  # fmt: skip
            rows.append(
                [name, setup, len(jobs), f"{every:g} s / {resolution:g} s", *found.values()]
            )
    header = ["workload", "actions", "jobs", "forecast every / resolution", *found.keys()]
    page = "\n".join(
        [
            "# Expected starts against actual starts (`python -m bench.eta`)",
            "",
            "The simulator plays each trace; every so often a forward play from the pass's "
            "snapshot, every run's duration known to it; each gang that had to wait keeps "
            "its first estimate. Errors in seconds from that play; error / wait is the "
            "error over how long the gang still waited from that play. Each workload with "
            "no hold, with the default actions (hold-head) and with reserve in its place. "
            "A reservation is a gang's first held target; one that started later than its "
            "reservation said (by more than the resolution) is counted, and counted again "
            "if a gang that started on its nodes after it was made still ran there then, "
            "and if that gang had backfilled (its Backfilled Event): the target is none.",
            "",
            *table(header, rows),
            "",
        ]
    )
    write(args.name, {"workloads": results}, page, quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
