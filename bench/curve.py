"""The cost curve: how gang-scheduler's figures grow with the cluster, from the bigger tier
run at three sizes with the same shape (gangs of 1 to 256, six pods a node):

    python -m bench.run --scale-xl --nodes 1000 --pods 6000 --only gang_scheduler --rounds 1
    python -m bench.run --scale-xl --nodes 5000 --pods 30000 --only gang_scheduler --rounds 1
    python -m bench.run --scale-xl --only gang_scheduler --rounds 1   # 10,000 nodes, 60,000 pods
    python -m bench.curve

(``make bench-curve`` runs each size's backlog and latency steps apart, ``--workload
backlog_mixed_gangs`` and ``--workload latency_mixed_gangs``, each on a fresh control plane)
reads ``bench/results/gang-scheduling-xl{-1000-nodes,-5000-nodes,}-only-gang-scheduler.json``,
and beside each the files of a step run alone (``...-backlog-mixed-gangs-only-gang-scheduler.json``,
``...-latency-mixed-gangs-only-gang-scheduler.json``, whose figures come first), and writes
``bench/results/cost-curve.md``: per size, pods/s, p99 gang latency, passes, peak RSS and
the longest event-loop stretch, and each one's growth against the size before it (the nodes
grow 5x, then 2x: a figure growing as fast as the nodes is linear in them).
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

from bench import report
from bench.run import parse, results_name
from bench.runs import Results, Round

SIZES = (1000, 5000, 10000)
FIGURES = (
    ("pods/s from start", "backlog_mixed_gangs", "pods_per_second"),
    ("start to first bind s", "backlog_mixed_gangs", "start_to_first_bind_seconds"),
    ("passes (backlog)", "backlog_mixed_gangs", "passes"),
    ("pass seconds in all (backlog)", "backlog_mixed_gangs", "pass_seconds"),
    ("peak RSS MiB (backlog)", "backlog_mixed_gangs", "peak_rss_mib"),
    ("longest event-loop stretch ms (backlog)", "backlog_mixed_gangs",
     "longest_event_loop_stretch_ms"),
    ("its loop-thread CPU ms (backlog)", "backlog_mixed_gangs",
     "longest_event_loop_stretch_cpu_ms"),
    ("p50 gang latency ms", "latency_mixed_gangs", "gang_latency_p50_ms"),
    ("p99 gang latency ms", "latency_mixed_gangs", "gang_latency_p99_ms"),
    ("seconds to create the pods (latency)", "latency_mixed_gangs", "creation_seconds"),
    ("drain after creation s (latency)", "latency_mixed_gangs", "drain_after_creation_seconds"),
    ("passes (latency)", "latency_mixed_gangs", "passes"),
)  # fmt: skip


def figure(results: Results, workload: str, key: str) -> float | None:
    """Ours, the median over the run's rounds (None if it failed or did not run)."""
    values = results.figures(workload, "gang_scheduler", key)
    return statistics.median(values) if values else None


def table(runs: list[tuple[int, Results]]) -> str:
    header = ["figure"]
    for i, (nodes, results) in enumerate(runs):
        pods = figure(results, "backlog_mixed_gangs", "pods")
        header.append(f"{nodes:,} nodes ({pods:,.0f} pods)" if pods else f"{nodes:,} nodes")
        if i:
            header.append(f"x from {runs[i - 1][0]:,}")
    lines = [
        "# Cost curve (gang-scheduler, gangs of 1 to 256, six pods a node)",
        "",
        "Medians over each run's rounds; a growth column is the figure at that size over the "
        "figure at the size before it (the nodes grow "
        + ", then ".join(f"{b / a:g}x" for (a, _), (b, _) in itertools.pairwise(runs))
        + ").",
        "",
    ]
    rows = []
    for title, workload, key in FIGURES:
        cells = [title]
        previous = None
        for i, (_, results) in enumerate(runs):
            value = figure(results, workload, key)
            cells.append("-" if value is None else f"{value:g}")
            if i:
                cells.append(f"{value / previous:.2f}" if value and previous else "-")
            previous = value
        rows.append(cells)
    lines += report.table(header, rows)
    return "\n".join(lines) + "\n"


def merged(parts: list[Results]) -> Results:
    """One size's results from the files of its steps: each workload from the first file
    that ran it (a step run alone comes before a run of both)."""
    rounds: list[dict[str, dict]] = []
    for workload in ("backlog_mixed_gangs", "latency_mixed_gangs"):
        for part in parts:
            ran = [one.workloads.get(workload) for one in part.rounds]
            if any(ran):
                for i, runs in enumerate(ran):
                    while len(rounds) <= i:
                        rounds.append({})
                    if runs:
                        rounds[i][workload] = runs
                break
    return Results({}, schedulers={}, rounds=tuple(Round(workloads=w) for w in rounds))


def results_path(nodes: int, workload: str | None) -> Path:
    """Where ``bench.run`` wrote our run of the bigger tier at ``nodes``, of one step or both."""
    argv = ["--scale-xl", "--nodes", str(nodes), "--only", "gang_scheduler"]
    return (
        report.RESULTS
        / f"{results_name(parse(argv + (['--workload', workload] if workload else [])))}.json"
    )


def main() -> int:
    runs = []
    for nodes in SIZES:
        paths = [
            results_path(nodes, step)
            for step in ("backlog_mixed_gangs", "latency_mixed_gangs", None)
        ]
        parts = [Results.read(path) for path in paths if path.exists()]
        if not parts:
            print(f"no {paths[-1].name}: run the bigger tier at {nodes} nodes first (see "
                  "python -m bench.curve's docstring)", file=sys.stderr)  # fmt: skip
            continue
        runs.append((nodes, merged(parts)))
    if not runs:
        return 1
    text = table(runs)
    (report.RESULTS / "cost-curve.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
