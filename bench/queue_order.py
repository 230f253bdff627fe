"""Does room freed go to the first gang in the queue? The simulator plays two traces with the
default actions and counts what the queue's order and its retries cost and give:

- **etacheck's busy trace** (``bench.etacheck``'s plan with 70 gangs of 1 to 16 GPUs over 6
  minutes on 4 nodes of 8 GPUs, runs of 45 s to 6 minutes, all of one priority): the pairs
  of identical gangs (same GPUs) that started in the reverse of the order they were posted
  in, and the forward play's error (a play every 10 s at a 5 s step, reaction 0.3 s) over
  the wait left, as ``bench.eta`` counts it;
- **an overloaded trace** (32 nodes of 8 GPUs, 2 hours at some 1,500 jobs an hour, runs of a
  median 15 minutes: up to ~1,200 members waiting): gang attempts, the process CPU of the
  play, GPU utilisation, whole nodes left free, gangs started and their waits.

The figures are deterministic (CPU apart). To compare two commits, run it in a worktree of
each; ``bench/results/queue-order.md`` has both.

    python -m bench.queue_order [--name NAME]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from bench.eta import _cluster
from bench.etacheck import FULL
from bench.report import table, write
from scheduler.sim import traces
from scheduler.sim.reporting import quantile, summary
from scheduler.sim.simulating import SIM_CONFIG, Played, Setup, simulate


def inversions(jobs: list[traces.Job], started: dict[str, float]) -> int:
    """Pairs of gangs of the same GPUs where the one posted later started first (by more
    than half a second: not the same pass)."""
    return sum(
        1
        for a in jobs
        for b in jobs
        if a.gpus == b.gpus
        and a.at < b.at
        and a.name in started
        and b.name in started
        and started[b.name] < started[a.name] - 0.5
    )


def busy_trace() -> dict[str, Any]:
    plan = replace(FULL, jobs=70)
    jobs = plan.trace(namespace="default")
    by = {j.name: j for j in jobs}
    run = simulate(
        _cluster(plan.nodes), jobs, setup=Setup(config=SIM_CONFIG), step=0.1, reaction=0.3,
        forecast_every=10.0, forecast_resolution=5.0,
    )  # fmt: skip
    started = {name: by[name].at + wait for name, _, _, wait in run.waits}
    ratios = [abs(p - a) / a for _, _, p, a in run.etas if a > 2.0]
    return {
        "gangs": len(jobs),
        "identical pairs started out of order": inversions(jobs, started),
        "gangs that waited (estimated)": len(ratios),
        "error / wait p50": round(quantile(ratios, 0.5), 3),
        "error / wait p90": round(quantile(ratios, 0.9), 3),
        "within 25% of the wait": f"{sum(r <= 0.25 for r in ratios) / len(ratios):.0%}",
    }


def overloaded_trace() -> dict[str, Any]:
    shape = traces.Shape(
        hours=2, jobs_per_hour=1500, duration_median=900, duration_sigma=0.8, duration_max=3600
    )
    jobs = traces.generate(seed=7, shape=shape)
    attempts = [0]

    def observe(played: Played) -> None:
        attempts[0] += sum(len(a.gangs) for a in played.result.attempts)

    cpu = time.process_time()
    run = simulate(
        _cluster(32), jobs, setup=Setup(config=SIM_CONFIG), step=1.0, reaction=0.03,
        observe=observe, until=7200.0,
    )  # fmt: skip
    cpu = time.process_time() - cpu
    found = summary(run)
    waits = [wait for *_, wait in run.waits]
    return {
        "gangs": len(jobs),
        "passes": run.passes,
        "gang attempts": attempts[0],
        "process CPU s": round(cpu, 1),
        "GPU utilisation (mean)": round(found["GPU utilisation (mean)"], 3),
        "whole free GPU nodes (mean)": round(found["whole free GPU nodes (mean)"], 2),
        "gangs started": found["gangs started"],
        "wait p50 of those started (s)": round(statistics.median(waits), 1),
        "still waiting at the end": found["still waiting at the end"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="queue-order")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    results = {"commit": commit, "busy": busy_trace(), "overloaded": overloaded_trace()}
    page = "\n".join(
        [
            f"# Room freed and the queue's order (`python -m bench.queue_order`, {commit})",
            "",
            *table(["etacheck's busy trace", ""], results["busy"].items()),
            "",
            *table(["overloaded trace", ""], results["overloaded"].items()),
            "",
        ]
    )
    write(args.name, results, page, quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
