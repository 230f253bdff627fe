"""The simulator's subcommands: ``snapshot``, ``forecast``, ``simulate`` and ``trace``.

Their flags are declared here and their modules imported only when one runs, so that
``gang-scheduler version`` and ``run`` load nothing of them (nor matplotlib).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_commands(commands: Any) -> None:
    snap = commands.add_parser(
        "snapshot",
        help="write the cluster as the scheduler sees it (nodes, pods, gangs, queues, "
        "topology) to a file, for simulate",
    )
    snap.add_argument("--output", "-o", required=True, metavar="FILE", help="where to write it")
    snap.add_argument(
        "--anonymise",
        "--anonymize",
        action="store_true",
        help="replace namespaces, names, node names and label values by tokens, "
        "consistently (gangs, queues and topology still resolve)",
    )
    snap.add_argument(
        "--kubeconfig", help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config)"
    )
    snap.add_argument(
        "--topology-namespace",
        default="gang-scheduler-system",
        help="where the topology ConfigMap lives (default: %(default)s)",
    )

    ahead = commands.add_parser(
        "forecast",
        help="when each waiting gang of a snapshot is expected to start, if the runs end when "
        "expected and nothing else arrives; with --add-nodes, beside what more nodes would do",
    )
    ahead.add_argument("snapshot", metavar="SNAPSHOT", help="a file written by `snapshot`")
    ahead.add_argument(
        "--add-nodes",
        metavar="NODE=COUNT",
        help="what if COUNT more nodes like NODE (copies of it, under new names) were there: "
        "each gang's expected start beside today's",
    )
    ahead.add_argument(
        "--resolution",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="the play's clock step: runs ending within it are played in one pass (a start is "
        "still said at the end that made room) (default: %(default)s)",
    )

    sim = commands.add_parser(
        "simulate",
        help="replay a snapshot and a trace of jobs through the scheduler's core in virtual "
        "time (no API server) and write a report with plots",
    )
    sim.add_argument("snapshot", metavar="SNAPSHOT", help="a file written by `snapshot`")
    sim.add_argument(
        "trace", metavar="TRACE", help="jobs: JSON lines or CSV (see `gang-scheduler trace`)"
    )
    sim.add_argument(
        "--output", "-o", required=True, metavar="DIR", help="where report.md and its PNGs go"
    )
    sim.add_argument(
        "--step", type=float, default=5.0, help="seconds between passes (default: %(default)s)"
    )
    sim.add_argument(
        "--reaction",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long after a job arrives or a pod ends the scheduler acts on it (its "
        "watch, its pass): matters at steps of that order; the real scheduler on a local "
        "control plane takes some 0.03 s (default: %(default)s, at once)",
    )
    sim.add_argument(
        "--until",
        type=float,
        metavar="SECONDS",
        help="stop this long after the start (default: once every job has ended)",
    )
    sim.add_argument(
        "--forecast-every",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="every that many seconds of virtual time, play the passes to come forward "
        "(as explain --forecast does) and report each waiting gang's first expected start "
        "against its actual start (default: never)",
    )
    which = sim.add_mutually_exclusive_group()
    which.add_argument(
        "--config",
        metavar="FILE",
        help="a setup (YAML/JSON): Config fields such as scoring, starvation_seconds, "
        "fair_share_half_life_seconds; queues: {NAME: {weight: 2}}; topology: false",
    )
    which.add_argument(
        "--compare",
        nargs=2,
        metavar=("CONFIG_A", "CONFIG_B"),
        help="play the trace under two setups, one report side by side",
    )

    gen = commands.add_parser(
        "trace",
        help="write a synthetic trace shaped like published GPU cluster traces (docs/simulate.md)",
    )
    gen.add_argument("--output", "-o", required=True, metavar="FILE", help=".jsonl or .csv")
    gen.add_argument("--seed", type=int, default=1, help="(default: %(default)s)")
    gen.add_argument("--hours", type=float, default=24.0, help="(default: %(default)s)")
    gen.add_argument(
        "--jobs-per-hour", type=float, default=20.0, help="on average (default: %(default)s)"
    )
    gen.add_argument(
        "--diurnal-amplitude",
        type=float,
        default=0.5,
        help="the arrival rate swings between 1-A and 1+A times its mean (default: %(default)s)",
    )
    gen.add_argument(
        "--duration-median", type=float, default=1200.0, help="seconds (default: %(default)s)"
    )
    gen.add_argument(
        "--duration-sigma",
        type=float,
        default=1.6,
        help="of the log-normal's log: its tail (default: %(default)s)",
    )
    gen.add_argument(
        "--queues",
        default="",
        metavar="NAME=SHARE,...",
        help="queues and the share of jobs each gets, e.g. team-a=3,team-b=1 (default: none)",
    )


def _pairs(raw: str) -> tuple[tuple[str, float], ...]:
    pairs = []
    for item in filter(None, (p.strip() for p in raw.split(","))):
        name, _, share = item.partition("=")
        try:
            pairs.append((name, float(share or 1)))
        except ValueError:
            raise ValueError(f"--queues takes NAME=SHARE,...; {item!r} has no number") from None
    return tuple(pairs)


def main(args: argparse.Namespace) -> int:
    if args.command == "snapshot":
        return _snapshot(args)
    if args.command == "forecast":
        return _forecast(args)
    if args.command == "simulate":
        return _simulate(args)
    return _trace(args)


def _snapshot(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    from scheduler.shell import snapshotting  # noqa: PLC0415
    from scheduler.shell.api import load_credentials  # noqa: PLC0415
    from scheduler.sim.anonymising import anonymise  # noqa: PLC0415

    try:
        document = asyncio.run(
            snapshotting.take(
                load_credentials(args.kubeconfig), topology_namespace=args.topology_namespace
            )
        )
    except Exception as error:  # no kubeconfig, the API server away or refusing: said
        print(f"error: could not read the cluster: {error}", file=sys.stderr)
        return 2
    if args.anonymise:
        document, _ = anonymise(document)
    snapshotting.write(document, args.output)
    lists = document["lists"]
    print(
        f"wrote {args.output}: {len(lists.get('nodes', []))} nodes, "
        f"{len(lists.get('pods', []))} pods" + (", anonymised" if args.anonymise else "")
    )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from scheduler.shell.snapshotting import read  # noqa: PLC0415
    from scheduler.sim import reporting, traces  # noqa: PLC0415
    from scheduler.sim.simulating import Setup, load_setup, simulate  # noqa: PLC0415

    try:
        document = read(args.snapshot)
        jobs = traces.read(args.trace)
        if args.compare:
            setups = [load_setup(path) for path in args.compare]
            if setups[0].name == setups[1].name:
                setups[1] = Setup(**{**setups[1].__dict__, "name": f"{setups[1].name} (B)"})
        else:
            setups = [load_setup(args.config) if args.config else Setup()]
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs = []
    for setup in setups:
        try:
            run = simulate(
                document, jobs, setup=setup, step=args.step, until=args.until,
                reaction=args.reaction, forecast_every=args.forecast_every,
            )  # fmt: skip
        except ValueError as error:  # --step, --reaction, a trace time that never comes
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(
            f"{setup.name}: {run.passes} passes over {run.seconds:.0f}s simulated "
            f"in {run.wall_seconds:.1f}s",
            file=sys.stderr,
        )
        runs.append(run)
    inputs = [
        f"snapshot: `{args.snapshot}`",
        f"trace: `{args.trace}` ({len(jobs)} jobs)",
        f"a pass every {args.step:g}s of virtual time"
        + (f", the scheduler acting {args.reaction:g}s after an event" if args.reaction else "")
        + (f", until {args.until:g}s" if args.until is not None else ", until every job ended"),
    ]
    title = "Simulation" if len(runs) == 1 else f"Simulation: {runs[0].setup} vs {runs[1].setup}"
    report = reporting.write(runs, args.output, title=title, inputs=inputs)
    print(report)
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from scheduler.shell.snapshotting import read  # noqa: PLC0415
    from scheduler.sim.forecasting import forecast_lines  # noqa: PLC0415

    try:
        document = read(args.snapshot)
        adding = _adding(args.add_nodes) if args.add_nodes else None
        lines = forecast_lines(document, adding=adding, resolution=args.resolution)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _adding(raw: str) -> tuple[str, int]:
    """--add-nodes NODE=COUNT."""
    name, _, count = raw.partition("=")
    if not name or not count.isdigit() or not 0 < int(count) <= 10_000:
        raise ValueError(
            f"--add-nodes takes NODE=COUNT, a node of the snapshot and 1 to 10000, got {raw!r}"
        )
    return name, int(count)


def _trace(args: argparse.Namespace) -> int:
    from scheduler.sim import traces  # noqa: PLC0415

    try:
        shape = traces.Shape(
            hours=args.hours,
            jobs_per_hour=args.jobs_per_hour,
            diurnal_amplitude=args.diurnal_amplitude,
            duration_median=args.duration_median,
            duration_sigma=args.duration_sigma,
            queues=_pairs(args.queues),
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    jobs = traces.generate(seed=args.seed, shape=shape)
    traces.write(jobs, args.output)
    print(f"wrote {args.output}: {len(jobs)} jobs over {args.hours:g}h (seed {args.seed})")
    return 0
