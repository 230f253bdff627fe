"""An A/B of this checkout against an earlier commit of ours, in one run on one machine.

Two figures, each measured in rounds that alternate the two checkouts, medians with min and
max:

* the pure pass (``bench.pass``: 5,000 nodes, 1,000 waiting gangs, 100 arriving; the core
  alone, as each checkout's own ``bench/pass.py`` runs it);
* the 1,000-node backlog of gangs of 8 (``bench.run --workload backlog_gangs_of_8``), ours
  beside the earlier checkout's scheduler (``gang_scheduler_base``), the bind ceiling measured
  in each round.

    git worktree add /tmp/base 260bdce
    python -m bench.ab --base /tmp/base --name core-v3-ab

writes ``bench/results/NAME.{json,md}`` (the backlog's own table is written by ``bench.run``
beside it). This checkout's ``pass.{json,md}`` are left as they were.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.report import RESULTS, table, write
from bench.schedulers import BASE_CHECKOUT, commit_of

HERE = Path(__file__).resolve().parent.parent
FIGURES = (
    ("first pass, ms", "first_pass_ms"),
    ("later passes p50, ms", "later_passes_p50_ms"),
    ("later passes p99, ms", "later_passes_p99_ms"),
    ("later passes max, ms", "later_passes_max_ms"),
)


def _pass_once(checkout: Path, args: list[str]) -> dict:
    """One ``bench.pass`` in ``checkout`` (its own code, this interpreter): its figures."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run(
        [sys.executable, "-m", "bench.pass", *args],
        cwd=checkout,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    figures = json.loads((checkout / "bench" / "results" / "pass.json").read_text())
    figures.pop("per_pass", None)  # the medians are what is compared
    return figures


def passes(base: Path, *, rounds: int, args: list[str]) -> dict[str, list[dict]]:
    """``rounds`` of the pure pass in each checkout, alternating, the base first in odd
    rounds; this checkout's pass files are put back afterwards."""
    kept = {
        name: (RESULTS / name).read_text()
        for name in ("pass.json", "pass.md")
        if (RESULTS / name).exists()
    }
    runs: dict[str, list[dict]] = {"base": [], "this": []}
    try:
        for number in range(rounds):
            order = [("base", base), ("this", HERE)]
            if number % 2:
                order.reverse()
            for side, checkout in order:
                print(f"round {number + 1}: pure pass, {side}", file=sys.stderr, flush=True)
                runs[side].append(_pass_once(checkout, args))
    finally:
        for name, text in kept.items():
            (RESULTS / name).write_text(text)
    return runs


def backlog(base: Path, *, rounds: int, nodes: int) -> str:
    """The backlog of gangs of 8 at ``nodes`` nodes, ours beside the base: the name of the
    results ``bench.run`` wrote."""
    argv = ["--only", "gang_scheduler", "--only", "gang_scheduler_base"]
    argv += ["--workload", "backlog_gangs_of_8", "--rounds", str(rounds)]
    if nodes != 1000:
        argv += ["--nodes", str(nodes)]
    env = {**os.environ, BASE_CHECKOUT: str(base)}
    subprocess.run([sys.executable, "-m", "bench.run", *argv], cwd=HERE, env=env, check=True)
    from bench.run import parse, results_name  # noqa: PLC0415

    return results_name(parse(argv))


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):g} ({min(values):g}-{max(values):g})"


def markdown(report: dict) -> str:
    runs = report["passes"]
    lines = [
        f"# Core v3 against {report['base']}, A/B in one run",
        "",
        f"This checkout ({report['this']}) against {report['base']}, the last commit before "
        "the redesign, on the same machine, rounds alternating the two; medians "
        "(min-max). Ratios below 1 mean this checkout takes less time.",
        "",
        f"## The pure pass (`python -m bench.pass {' '.join(report['pass_args'])}`, "
        f"{len(runs['this'])} rounds)",
        "",
    ]
    rows = []
    for title, key in FIGURES:
        base = [r[key] for r in runs["base"]]
        this = [r[key] for r in runs["this"]]
        ratio = statistics.median(this) / statistics.median(base) if statistics.median(base) else 0
        rows.append([title, _spread(base), _spread(this), f"{ratio:.2f}"])
    lines += table(["figure", report["base"], report["this"], "this / base (medians)"], rows)
    lines.append("")
    if report.get("backlog"):
        lines += [
            "## The 1,000-node backlog of gangs of 8",
            "",
            f"`python -m bench.run --only gang_scheduler --only gang_scheduler_base "
            f"--workload backlog_gangs_of_8 --rounds {report['backlog_rounds']}`, the base "
            f"checkout's scheduler started from its own tree: `{report['backlog']}.md` has "
            "the table (pods/s from start and from the first bind, against the bind ceiling "
            "of each round and against each other).",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the commit to beat")
    parser.add_argument("--name", default="core-v3-ab", help="bench/results/NAME.{json,md}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pass-args", default="", help="arguments of bench.pass, quoted")
    parser.add_argument("--no-backlog", action="store_true", help="the pure pass only")
    args = parser.parse_args(argv)
    base = args.base.resolve()
    if not (base / "bench" / "pass.py").is_file():
        print(f"error: {base} is not a checkout of gang-scheduler", file=sys.stderr)
        return 2
    pass_args = args.pass_args.split()
    report: dict = {
        "base": commit_of(base),
        "this": commit_of(HERE),
        "pass_args": pass_args,
        "passes": passes(base, rounds=args.rounds, args=pass_args),
    }
    if not args.no_backlog:
        report["backlog"] = backlog(base, rounds=args.rounds, nodes=1000)
        report["backlog_rounds"] = args.rounds
    write(args.name, report, markdown(report), quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
