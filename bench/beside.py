"""Runs of one tier made apart, one scheduler each, put in one table.

At 10,000 nodes a scheduler's 60,000 pods take longer to delete than a fresh control plane
takes to start (over 13 minutes for 30,000 at 5,000 nodes on this machine), so the bigger
tier runs each scheduler alone, one after another, each on a control plane of its own:

    python -m bench.run --scale-xl --workload backlog_mixed_gangs --rounds 1 --no-ceiling \
        --only gang_scheduler
    python -m bench.run ... --only kube_scheduler
    ...
    python -m bench.beside gang-scheduling-xl-backlog-mixed-gangs

(``make bench-xl``) reads every ``bench/results/NAME-only-*.json`` and writes
``NAME.{json,md}``, the file a run of all of them together would have written, with a first
paragraph saying they ran apart: its ratios compare runs on different control planes of the
same machine, one after another, not schedulers interleaved in one run. It puts together
whatever files are there: ``make bench-xl`` deletes the old ones first, so that a peer whose
run died before writing is missing from the table rather than shown from an older run (the
cost curve's run of ours, ``make bench-curve``, writes the same file as ours here). A bind
ceiling is not carried over: each run had a control plane of its own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.report import RESULTS, write
from bench.run import SCHEDULERS, markdown
from bench.runs import Results, Round

# What must agree for runs to share a table: the same work on the same kind of cluster.
SAME = (
    "nodes", "largest_gang", "machine", "control_plane", "client", "concurrency", "audit",
    "contention_timeout_seconds", "quiet_seconds", "quiet_cap_seconds",
)  # fmt: skip


def merged(parts: list[Results]) -> Results:
    """One run's results from runs of different schedulers: ours first, then the peers in
    the bench's order. Runs that differ in any of ``SAME`` cannot share a table."""
    if not parts:
        raise ValueError("no runs to put together")
    for key in SAME:
        values = {json.dumps(part.setting(key), sort_keys=True) for part in parts}
        if len(values) > 1:
            raise ValueError(f"the runs differ in {key}: {', '.join(sorted(values))}")
    order = {name: i for i, name in enumerate(SCHEDULERS)}

    def first(part: Results) -> int:
        return min((order.get(name, len(order)) for name in part.schedulers), default=0)

    parts = sorted(parts, key=first)
    schedulers: dict[str, Mapping[str, Any]] = {}
    rounds: list[Round] = []
    for part in parts:
        for name, scheduler in part.schedulers.items():
            if name in schedulers:
                raise ValueError(f"{name} ran in more than one of the runs")
            schedulers[name] = scheduler
        for i, one in enumerate(part.rounds):
            while len(rounds) <= i:
                rounds.append(Round())
            into = rounds[i]
            workloads = {w: dict(runs) for w, runs in into.workloads.items()}
            for workload, runs in one.workloads.items():
                workloads.setdefault(workload, {}).update(runs)
            # no bind ceiling is carried over: each run had a control plane of its own
            rounds[i] = Round(order=into.order + one.order, workloads=workloads)
    return Results(dict(parts[0].settings), schedulers=schedulers, rounds=tuple(rounds))


def preface(names: list[str]) -> str:
    return (
        "<!-- Put together by `python -m bench.beside` from runs made apart, one scheduler "
        "each, one after another, each on a control plane of its own: "
        + ", ".join(f"`{n}`" for n in names)
        + ". A ratio here compares runs on different control planes of the same machine, "
        "not schedulers interleaved in one run. -->\n\n"
    )


def main(argv: list[str] | None = None, *, results: Path = RESULTS) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.beside NAME (reads bench/results/NAME-only-*.json)",
              file=sys.stderr)  # fmt: skip
        return 2
    name = args[0]
    paths = sorted(results.glob(f"{name}-only-*.json"))
    if not paths:
        print(f"no bench/results/{name}-only-*.json: run each scheduler with --only first "
              "(see python -m bench.beside's docstring)", file=sys.stderr)  # fmt: skip
        return 1
    parts = []
    for path in paths:
        try:
            part = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            print(f"cannot read {path.name}: {error}; run that scheduler again", file=sys.stderr)
            return 1
        if not isinstance(part, dict) or not all(
            isinstance(part.get(k), (dict, list)) for k in ("schedulers", "rounds")
        ):
            print(f"{path.name} is not a bench.run result (no schedulers and rounds); run that "
                  "scheduler again", file=sys.stderr)  # fmt: skip
            return 1
        parts.append(Results.from_json(part))
    try:
        merged_results = merged(parts)
    except ValueError as error:
        print(f"cannot put these runs together: {error}", file=sys.stderr)
        return 1
    text = preface([p.name for p in paths]) + markdown(merged_results)
    write(name, merged_results.to_json(), text, into=results, quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
