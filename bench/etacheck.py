"""``python -m bench.etacheck``: are expected starts right when the real scheduler runs? (#47)

A trace of gangs is played for real on KWOK nodes, as ``make simcheck`` plays its own
(``bench.simcheck.RealRun``: each job's pods created at its arrival, KWOK ending each pod
its duration after it runs), with gang-scheduler running ``--forecast-interval``. Two kinds
of trace:

- **declared**: each pod says its run time (``gang-scheduler.io/expected-duration``, the
  trace's duration: what KWOK will take);
- **learned** (``--learned``): pods say nothing but a duration class (their gang's size);
  the play knows a run only from the finished runs of its class still listed.

Every ``EVERY`` seconds the harness takes a snapshot of the cluster (what ``gang-scheduler
snapshot`` writes) and plays it forward with the live forecaster's code and settings
(``core.forecasting.forecast``), once per resolution of ``RESOLUTIONS``: the live
forecaster's 60 s, and one in the same ratio to this trace's minutes as 60 s is to runs of
hours. Each gang that had to wait keeps the first estimate made while it waited, set
against the moment its last member was bound; the error over its wait from that estimate
is what the targets of #47 speak of (median under 10%, p90 under 25%, declared durations).
Also kept: the first ``gang-scheduler.io/expected-start`` the live scheduler wrote on one of
a gang's pods (whole minutes, rounded up), against the same start.

Figures go to ``bench/results/eta-check[-learned].{json,md}``.

    python -m bench.etacheck [--short] [--learned]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.eta import with_reserve
from bench.report import RESULTS, table, write
from bench.schedulers import stop
from bench.simcheck import (
    NODE_LABEL,
    Plan,
    RealRun,
    config,
    ensure_priority_classes,
    narrowed,
    node_manifests,
    played_for_real,
    quantile,
    start_scheduler,
)
from scheduler.core.forecasting import forecast
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.times import parse_time
from scheduler.shell import snapshotting
from scheduler.shell.api import ApiClient, ApiError, load_credentials
from scheduler.sim.traces import Job
from testbed import cluster as local_cluster
from testbed.nodes import api_client, create_nodes, wait_ready

REPO = Path(__file__).resolve().parent.parent
CHECK_DIR = REPO / ".cluster-etacheck"
# Seconds between the harness's snapshots, and the live scheduler's --forecast-interval.
EVERY = 10.0
# The plays' clock steps: the live forecaster's, and 5 s (to runs of minutes what 60 s is to
# runs of an hour).
RESOLUTIONS = (60.0, 5.0)
# A gang counts as having waited once its first estimate was made this long before it
# started: one that binds within a second of the snapshot was only slower than the play.
WAITED = 2.0

# About 40 gangs of 1 to 16 GPUs over 6 minutes on 4 nodes of 8 GPUs, runs of 45 s to 6
# minutes: some 1.4 times what the nodes hold while they arrive, so that queues form; about
# 12 minutes a run. The short plan: a smoke of the harness, some 3 minutes.
FULL = Plan(
    seed=47, jobs=40, span=360.0, nodes=4, duration_median=120.0, duration_sigma=0.5,
    duration_min=45.0, duration_max=360.0, largest=16,
)  # fmt: skip
SHORT = Plan(
    seed=48, jobs=12, span=60.0, nodes=2, duration_median=30.0, duration_sigma=0.4,
    duration_min=15.0, duration_max=60.0, largest=16,
)  # fmt: skip


def with_durations(manifests: list[dict], job: Job, *, learned: bool) -> list[dict]:
    """The pods told their run time (declared), or only its class (learned: the gang's size
    in GPUs, so that the play learns each class from its finished runs)."""
    for manifest in manifests:
        meta = manifest["metadata"]
        if learned:
            meta["labels"] = {**meta["labels"], names.DURATION_CLASS: f"gpus-{job.gpus}"}
        else:
            meta["annotations"][names.EXPECTED_DURATION] = f"{job.duration:g}s"
    return manifests


@dataclass
class Estimate:
    """The first estimate of one gang made while it waited, in seconds of the trace."""

    made: float
    state: str
    start: float | None  # p50
    latest: float | None  # p90


@dataclass
class EtaRun(RealRun):
    """A real run that also keeps, per gang, the first estimate of each play and the first
    expected start the live scheduler wrote."""

    learned: bool = False
    settings: Config | None = None
    namespace_nodes: set[str] = field(default_factory=set)
    credentials: Any = None
    estimates: dict[float, dict[str, Estimate]] = field(default_factory=dict)
    written: dict[str, Estimate] = field(default_factory=dict)
    plays: int = 0
    missed: list[str] = field(default_factory=list)  # snapshots not taken, and why
    play_seconds: list[float] = field(default_factory=list)

    def manifests(self, job: Job, *, gang: str) -> list[dict]:
        return with_durations(super().manifests(job, gang=gang), job, learned=self.learned)

    def seen(self, pod: dict, *, deleted: bool = False) -> None:
        super().seen(pod, deleted=deleted)
        meta = pod.get("metadata", {})
        gang = self.gang_of.get(meta.get("name", ""))
        said = (meta.get("annotations") or {}).get(names.EXPECTED_START)
        at = parse_time(said) if said else None
        if gang is None or gang in self.written or at is None:  # no estimate: words
            return
        self.written[gang] = Estimate(
            made=self.now(), state="written", start=at - self.start_epoch, latest=None
        )

    async def forecasting(self) -> None:
        """A snapshot and its plays every ``EVERY`` seconds, until cancelled."""
        assert self.settings is not None
        while True:
            await asyncio.sleep(EVERY)
            wall = time.time()
            made = self.now()
            try:
                document = await snapshotting.take(self.credentials)
            except ApiError as error:  # the API server away a moment: the next snapshot
                self.missed.append(f"{made:.0f}s: {error}")
                continue
            document = narrowed(document, nodes=self.namespace_nodes, namespace=self.namespace)
            started = time.perf_counter()
            found = await asyncio.to_thread(play, document, now=wall, settings=self.settings)
            self.play_seconds.append(time.perf_counter() - started)
            self.plays += 1
            for resolution, etas in found.items():
                first = self.estimates.setdefault(resolution, {})
                for gang, (state, p50, p90) in etas.items():
                    if gang in first or gang not in self.incarnations:
                        continue
                    first[gang] = Estimate(
                        made=made,
                        state=state,
                        start=None if p50 is None else p50 - self.start_epoch,
                        latest=None if p90 is None else p90 - self.start_epoch,
                    )


def play(
    document: Mapping[str, Any], *, now: float, settings: Config
) -> dict[float, dict[str, tuple[str, float | None, float | None]]]:
    """Each resolution's forward play of ``document``: per waiting gang (by name), its
    state, p50 and p90 (seconds since the epoch)."""
    cache = snapshotting.fold(document, config=settings)
    snapshot = cache.snapshot(now=now, whole=True)
    found = {}
    for resolution in RESOLUTIONS:
        seen = snapshot
        if "reserve" in settings.actions:
            # The live passes reserve from the scheduler's last forecast, which no snapshot of
            # the API holds; without one, reserve does nothing and the play would let every
            # gang backfill. A first play stands for it.
            first = forecast(snapshot, now=now, config=settings, resolution=resolution)
            seen = replace(snapshot, forecast=first)
        result = forecast(seen, now=now, config=settings, resolution=resolution)
        found[resolution] = {
            key.name: (eta.state.value, eta.p50, eta.p90) for key, eta in result.etas.items()
        }
    return found


def starts(run: RealRun) -> dict[str, float]:
    """Each gang's start: when its last member was bound (trace seconds); gangs evicted
    count by their last incarnation's name, as the play saw them."""
    return {
        gang: max(inc.bound.values())
        for gang, inc in run.incarnations.items()
        if inc.pods and len(inc.bound) == len(inc.pods)
    }


def submissions(run: RealRun) -> dict[str, float]:
    """When each gang's first pod was posted (trace seconds)."""
    return {gang: inc.submitted for gang, inc in run.incarnations.items()}


def overtaken(
    gang: str, made: float, started: Mapping[str, float], submitted: Mapping[str, float]
) -> list[str]:
    """The gangs posted after ``gang``'s estimate was made that started before it: what no
    play from that moment could know of (they sorted ahead of it, or took room it was to
    start on)."""
    start = started[gang]
    return sorted(
        other
        for other, at in submitted.items()
        if other != gang and at > made and started.get(other, start) < start
    )


def accuracy(
    estimates: Mapping[str, Estimate],
    started: Mapping[str, float],
    submitted: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The first estimates against the starts, for the gangs that waited: the error and the
    error over the wait from the estimate, their p50 and p90; the states of the others.
    With ``submitted``, the same over the gangs no later arrival overtook, and each gang's
    line."""
    errors, ratios, late, states = [], [], 0, {}
    foreseeable: list[float] = []
    lines = []
    for gang, estimate in sorted(estimates.items()):
        actual = started.get(gang)
        if actual is None or actual - estimate.made < WAITED:
            continue
        states[estimate.state] = states.get(estimate.state, 0) + 1
        if estimate.start is None:
            continue
        error = abs(estimate.start - actual)
        errors.append(error)
        ratio = error / (actual - estimate.made)
        ratios.append(ratio)
        late += actual > estimate.start
        if submitted is None:
            continue
        ahead = overtaken(gang, estimate.made, started, submitted)
        if not ahead:
            foreseeable.append(ratio)
        lines.append(
            {
                "gang": gang,
                "made": round(estimate.made, 1),
                "estimated": round(estimate.start, 1),
                "started": round(actual, 1),
                "error / wait": round(ratio, 3),
                "overtaken by": ahead,
            }
        )
    more: dict[str, Any] = {}
    if submitted is not None:
        more = {
            "not overtaken": len(foreseeable),
            "error / wait p50, not overtaken": round(quantile(foreseeable, 0.5), 3),
            "error / wait p90, not overtaken": round(quantile(foreseeable, 0.9), 3),
        }
    return {
        "gangs that waited": sum(states.values()),
        "states": dict(sorted(states.items())),
        "estimated": len(errors),
        "error p50 (s)": round(quantile(errors, 0.5), 1),
        "error p90 (s)": round(quantile(errors, 0.9), 1),
        "error / wait p50": round(quantile(ratios, 0.5), 3),
        "error / wait p90": round(quantile(ratios, 0.9), 3),
        "within 10% of the wait": (
            f"{sum(r <= 0.1 for r in ratios) / len(ratios):.0%}" if ratios else "-"
        ),
        "within 25% of the wait": (
            f"{sum(r <= 0.25 for r in ratios) / len(ratios):.0%}" if ratios else "-"
        ),
        "started later than estimated": late,
        **more,
        **({"gangs": lines} if submitted is not None else {}),
    }


async def check(args: argparse.Namespace) -> dict[str, Any]:
    given = {"seed": args.seed, "jobs": args.jobs}
    plan = replace(SHORT if args.short else FULL, **{k: v for k, v in given.items() if v})
    kubeconfig = (
        Path(args.kubeconfig) if args.kubeconfig else local_cluster.up(CHECK_DIR).kubeconfig
    )
    log = kubeconfig.parent / "logs" / "scheduler-etacheck.log"
    credentials = load_credentials(str(kubeconfig))
    api = ApiClient(credentials, connections=32)
    settings = config("etacheck")
    if args.reserve:
        settings = replace(settings, actions=with_reserve(settings.actions))
    try:
        run_id = f"eta-{int(time.time()) % 100000}"
        manifests = node_manifests(plan, prefix=f"{run_id}-", labels={NODE_LABEL: run_id})
        create_nodes(api_client(kubeconfig), manifests)
        wait_ready(api_client(kubeconfig), len(manifests), timeout=120)
        namespace = f"etacheck-{int(time.time())}"
        await api.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
        jobs = plan.trace(namespace=namespace)
        await ensure_priority_classes(api, jobs)
        scheduler = start_scheduler(
            kubeconfig, log, settings,
            more=("--forecast-interval", f"{EVERY:g}", "--actions", ",".join(settings.actions)),
        )  # fmt: skip
        run = EtaRun(
            api=api, jobs=jobs, namespace=namespace, scheduler=settings.scheduler_name,
            node_selector={NODE_LABEL: run_id}, total_gpus=plan.nodes * plan.gpus_per_node,
            learned=args.learned, settings=settings, credentials=credentials,
            namespace_nodes={m["metadata"]["name"] for m in manifests},
        )  # fmt: skip
        try:
            print(f"{len(jobs)} jobs in {namespace}", flush=True)
            plays = asyncio.get_running_loop().create_task(_after_start(run))
            try:
                await run.play(timeout=plan.span + args.drain)
            finally:
                plays.cancel()
                await asyncio.gather(plays, return_exceptions=True)
        finally:
            stop(scheduler)
    finally:
        await api.close()
        if not args.kubeconfig:
            local_cluster.down(CHECK_DIR)
    started, submitted = starts(run), submissions(run)
    return {
        "plan": {**vars(plan)},
        "durations": "learned" if args.learned else "declared",
        "actions": list(settings.actions),
        "jobs": len(jobs),
        "snapshots": run.plays,
        "snapshots missed": run.missed,
        "play seconds p50": round(quantile(run.play_seconds, 0.5), 2),
        "plays": {
            f"{resolution:g} s": accuracy(run.estimates.get(resolution, {}), started, submitted)
            for resolution in RESOLUTIONS
        },
        "written (whole minutes)": accuracy(run.written, started),
    }


async def _after_start(run: EtaRun) -> None:
    while not run.start:  # play() sets the trace's 0 once its watch is up
        await asyncio.sleep(0.05)
    await run.forecasting()


def markdown(results: Mapping[str, Any]) -> str:
    rows = [
        [f"play, resolution {name}", *_cells(found)] for name, found in results["plays"].items()
    ]
    rows.append(
        ["written on the pods (whole minutes)", *_cells(results["written (whole minutes)"])]
    )
    keys = list(results["written (whole minutes)"])
    rows = [row[: len(keys) + 1] for row in rows]
    plays = results["plays"]
    finest = f"{min(RESOLUTIONS):g} s"
    apart = [
        [f"play, resolution {name}", found.get("not overtaken", "-"),
         found.get("error / wait p50, not overtaken", "-"),
         found.get("error / wait p90, not overtaken", "-")]
        for name, found in plays.items()
    ]  # fmt: skip
    gangs = [
        [g["gang"], g["made"], g["estimated"], g["started"], g["error / wait"],
         ", ".join(g["overtaken by"]) or "-"]
        for g in plays.get(finest, {}).get("gangs", [])
    ]  # fmt: skip
    return "\n".join(
        [
            f"# Expected starts on the real scheduler, durations {results['durations']} "
            "(`python -m bench.etacheck`)",
            "",
            f"The scheduler's actions: {', '.join(results.get('actions', ['(not recorded)']))}.",
            "",
            f"{results['jobs']} gangs played for real on KWOK nodes; a snapshot every "
            f"{EVERY:g} s ({results['snapshots']} in all, each played in "
            f"{results['play seconds p50']} s at the median). Per gang that waited, its first "
            "estimate against when its last member was bound; error / wait is over the wait "
            "left from that estimate. Targets (#47, declared durations): median under 10%, "
            "p90 under 25%.",
            "",
            *table(["estimate", *keys], rows),
            "",
            "The same over the gangs that no gang posted after the estimate overtook (started "
            "before them): what a play from that moment could know.",
            "",
            *table(["estimate", "gangs", "error / wait p50", "error / wait p90"], apart),
            "",
            f"Each gang that waited, the play at {finest} (trace seconds):",
            "",
            *table(
                [
                    "gang",
                    "estimate made",
                    "estimated start",
                    "started",
                    "error / wait",
                    "overtaken by (posted later, started sooner)",
                ],
                gangs,
            ),
            "",
            f"Plan: `{json.dumps(results['plan'])}`.",
            "",
        ]
    )


def plot(results: Mapping[str, Any], path: Path) -> Path:
    """Each waiting gang's estimated wait against its real one (from the estimate), one
    panel per play's resolution: on the diagonal, right; overtaken gangs marked apart."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plays = results["plays"]
    fig, axes = plt.subplots(1, len(plays), figsize=(5 * len(plays), 4), squeeze=False)
    for ax, (name, found) in zip(axes[0], plays.items(), strict=True):
        lines = found.get("gangs", [])
        for overtook, marker, label in ((False, "o", "not overtaken"), (True, "x", "overtaken")):
            shown = [g for g in lines if bool(g["overtaken by"]) == overtook]
            ax.scatter(
                [g["started"] - g["made"] for g in shown],
                [g["estimated"] - g["made"] for g in shown],
                marker=marker,
                label=f"{label} ({len(shown)})",
            )
        top = max([g["started"] - g["made"] for g in lines] + [1.0]) * 1.1
        ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
        ax.set_title(f"play at {name}")
        ax.set_xlabel("real wait from the estimate (s)")
        ax.set_ylabel("estimated wait (s)")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return path


def _cells(found: Mapping[str, Any]) -> list[Any]:
    return [
        ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else value
        for value in found.values()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.etacheck", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--short", action="store_true", help="a smoke: about 12 gangs, 3 minutes")
    parser.add_argument("--learned", action="store_true", help="durations learned, not declared")
    parser.add_argument("--seed", type=int, help="the trace's seed")
    parser.add_argument(
        "--jobs", type=int, help="gangs over the same span (a busier trace: more of them wait)"
    )
    parser.add_argument("--drain", type=float, default=1200.0, help="seconds to finish in")
    parser.add_argument(
        "--reserve", action="store_true", help="the scheduler with reserve in hold-head's place"
    )
    parser.add_argument("--kubeconfig", help="a running control plane (default: start one)")
    parser.add_argument("--name", help="results' file name (default eta-check[-learned][-reserve])")
    args = parser.parse_args(argv)
    results = played_for_real(check(args), what="etacheck")
    if results is None:
        return 1
    kinds = [kind for kind, on in (("learned", args.learned), ("reserve", args.reserve)) if on]
    name = args.name or "-".join(["eta-check", *kinds])
    figure = plot(results, RESULTS / f"{name}.png")
    write(name, results, markdown(results) + f"\n![estimated against real waits]({figure.name})\n",
          quiet=False)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
