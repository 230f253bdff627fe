"""The simulator's report: ``report.md`` with PNG figures beside it, one column (and one
line in each figure) per setup played, so that two setups on the same trace read side by
side. Nothing in it depends on the wall clock: the same runs give the same report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler.sim.simulating import BUCKETS, Run

FIGURES = ("utilisation", "waits", "fragmentation", "preemptions", "shares")


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least ``q`` of them at or
    below it (the median of [1, 100] is 1); 0 for no values."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(max(math.ceil(q * len(ordered)) - 1, 0), len(ordered) - 1)]


def time_mean(run: Run, series: Sequence[float]) -> float:
    """The mean over time of a series sampled at ``run.times`` (each sample holds until the
    next: passes skipped while nothing changed count for the time they cover)."""
    if not series:
        return 0.0
    ends = [*run.times[1:], max(run.seconds, run.times[-1])]
    spans = [max(end - start, 0.0) for start, end in zip(run.times, ends, strict=True)]
    total = sum(spans)
    if total <= 0:
        return sum(series) / len(series)
    return sum(v * s for v, s in zip(series, spans, strict=True)) / total


def _queues(runs: Sequence[Run]) -> list[str]:
    """The leaf queues that held or deserved something at some point (not an idle default)."""
    return sorted(
        {q for run in runs for q in run.shares if any(run.shares[q]) or any(run.ideal[q])}
    )


def summary(run: Run) -> dict[str, Any]:
    waits = [w for *_, w in run.waits]
    queues = sorted(run.shares)
    deviation = {
        q: time_mean(run, [abs(s - i) for s, i in zip(run.shares[q], run.ideal[q], strict=True)])
        for q in queues
    }
    return {
        "jobs": run.jobs,
        "gangs started": len(run.waits),
        "jobs finished": run.finished,
        "still running at the end": run.still_running,
        "still waiting at the end": run.still_waiting,
        "timed out": run.timed_out,
        "GPU utilisation (mean)": time_mean(run, run.gpu_util),
        "CPU utilisation (mean)": time_mean(run, run.cpu_util),
        "gang wait p50 (s)": quantile(waits, 0.5),
        "gang wait p99 (s)": quantile(waits, 0.99),
        "stranded GPUs (mean)": time_mean(run, run.stranded_gpus),
        "whole free GPU nodes (mean)": time_mean(run, run.whole_gpu_nodes),
        "members waiting (mean)": time_mean(run, run.waiting_members),
        "pods preempted": run.preempted[-1] if run.preempted else 0,
        "pods reclaimed": run.reclaimed[-1] if run.reclaimed else 0,
        "queue share deviation from ideal (mean)": (
            sum(deviation.values()) / len(deviation) if deviation else 0.0
        ),
        "passes": run.passes,
        "simulated seconds": run.seconds,
    }


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _waits_by(runs: Sequence[Run], index: int, keys: Sequence[str]) -> list[list[Any]]:
    rows = []
    for key in keys:
        row: list[Any] = [key]
        for run in runs:
            waits = [w[3] for w in run.waits if w[index] == key]
            row += [len(waits), quantile(waits, 0.5), quantile(waits, 0.99)]
        rows.append(row)
    return rows


def markdown(runs: Sequence[Run], *, title: str, inputs: Sequence[str]) -> str:
    names = [run.setup for run in runs]
    summaries = [summary(run) for run in runs]
    first = runs[0]
    lines = [
        f"# {title}",
        "",
        *(f"- {line}" for line in inputs),
        f"- cluster: {first.nodes} ready nodes, {first.total_gpus} GPUs; "
        f"setups: {', '.join(f'`{n}`' for n in names)}",
        "",
        "## Summary",
        "",
        *_table(
            ["", *names],
            [[key, *(s[key] for s in summaries)] for key in summaries[0]],
        ),
        "## Utilisation over time",
        "",
        "Requested over allocatable, on the ready, schedulable nodes, as each pass leaves them.",
        "",
        "![utilisation](utilisation.png)",
        "",
        "## Gang wait",
        "",
        "From arrival (again after an eviction) to bind, per gang that started.",
        "",
        "By size (GPUs in all):",
        "",
    ]
    per_setup = [f"{h} ({n})" for n in names for h in ("gangs", "p50 s", "p99 s")]
    buckets = [b for b in BUCKETS if any(w[2] == b for run in runs for w in run.waits)]
    lines += _table(["size", *per_setup], _waits_by(runs, 2, buckets))
    queues = sorted({w[1] for run in runs for w in run.waits})
    lines += ["By queue:", ""]
    lines += _table(["queue", *per_setup], _waits_by(runs, 1, queues))
    lines += ["![waits](waits.png)", ""]
    lines += [
        "## Fragmentation over time",
        "",
        "GPUs free on nodes that cannot take even the smallest waiting member (stranded), and "
        "nodes whose GPUs are all free (`core.fragmentation.measure`).",
        "",
        "![fragmentation](fragmentation.png)",
        "",
        "## Preemptions and reclaims",
        "",
        "Pods evicted for a gang of higher priority (preempted) or for a queue below its fair "
        "share (reclaimed), cumulative.",
        "",
        *_table(
            ["", *names],
            [
                ["pods preempted", *(s["pods preempted"] for s in summaries)],
                ["pods reclaimed", *(s["pods reclaimed"] for s in summaries)],
            ],
        ),
        "![preemptions](preemptions.png)",
        "",
        "## Queue shares against their ideal",
        "",
        "Each leaf queue's share of the cluster's GPUs against its ideal share (the "
        "water-filled fair share of what the queues want at that moment), means over time.",
        "",
    ]
    all_queues = _queues(runs)
    if all_queues:
        header = ["queue", *(f"{h} ({n})" for n in names for h in ("share", "ideal", "deviation"))]
        rows = []
        for queue in all_queues:
            row: list[Any] = [queue]
            for run in runs:
                share, ideal = run.shares.get(queue, []), run.ideal.get(queue, [])
                dev = [abs(s - i) for s, i in zip(share, ideal, strict=True)]
                row += [time_mean(run, share), time_mean(run, ideal), time_mean(run, dev)]
            rows.append(row)
        lines += _table(header, rows)
        lines += ["![shares](shares.png)", ""]
    else:
        lines += ["No queues: the snapshot serves none and the trace names none.", ""]
    if any(run.forecasts for run in runs):
        lines += _eta_lines(runs, names)
    return "\n".join(lines)


def eta_errors(run: Run) -> dict[str, Any]:
    """How the first forecast of each gang that had to wait compared with its start."""
    errors = [abs(predicted - actual) for _, _, predicted, actual in run.etas]
    ratios = [abs(p - a) / a for _, _, p, a in run.etas if a > 0]
    return {
        "forecasts made": run.forecasts,
        "gangs estimated while waiting": len(run.etas),
        "start error p50 (s)": quantile(errors, 0.5),
        "start error p90 (s)": quantile(errors, 0.9),
        "error / wait p50": round(quantile(ratios, 0.5), 3) if ratios else "-",
        "within 10% of the wait": (
            f"{sum(r <= 0.1 for r in ratios) / len(ratios):.0%}" if ratios else "-"
        ),
        "started later than predicted": sum(a > p for _, _, p, a in run.etas),
    }


def _eta_lines(runs: Sequence[Run], names: Sequence[str]) -> list[str]:
    found = [eta_errors(run) for run in runs]
    return [
        "## Expected starts against actual starts",
        "",
        "Each gang that had to wait, at the first forward play (`core.forecasting`) made while "
        "it waited: the start it predicted against the start it got, in seconds from that "
        "play. Every run's duration is known to the play (the trace's); what it cannot know "
        "is the jobs that arrive after it.",
        "",
        *_table(["", *names], [[key, *(f[key] for f in found)] for key in found[0]]),
    ]


def plots(runs: Sequence[Run], out: Path) -> list[Path]:  # noqa: PLR0915 (five figures)
    """The figures, one PNG each; matplotlib's Agg backend (no display)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plt.rcParams["svg.hashsalt"] = "gang-scheduler"
    written = []

    def save(fig: Any, name: str) -> None:
        path = out / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90, metadata={"Software": None})
        plt.close(fig)
        written.append(path)

    def hours(run: Run) -> list[float]:
        return [t / 3600 for t in run.times]

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), sharey=True)
    for run in runs:
        axes[0].step(hours(run), run.gpu_util, where="post", label=run.setup)
        axes[1].step(hours(run), run.cpu_util, where="post", label=run.setup)
    for ax, what in zip(axes, ("GPU", "CPU"), strict=True):
        ax.set_title(f"{what} utilisation")
        ax.set_xlabel("hours")
        ax.set_ylim(0, 1.05)
        ax.legend()
    save(fig, "utilisation")

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    width = 0.8 / max(len(runs), 1)
    for i, run in enumerate(runs):
        for ax, index, keys in (
            (axes[0], 2, [b for b in BUCKETS if any(w[2] == b for w in run.waits)]),
            (axes[1], 1, sorted({w[1] for w in run.waits})),
        ):
            p50 = [quantile([w[3] for w in run.waits if w[index] == k], 0.5) for k in keys]
            p99 = [quantile([w[3] for w in run.waits if w[index] == k], 0.99) for k in keys]
            xs = [x + i * width for x in range(len(keys))]
            ax.bar(xs, p99, width, alpha=0.4, label=f"{run.setup} p99")
            ax.bar(xs, p50, width, label=f"{run.setup} p50")
            ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(keys))], keys)
    axes[0].set_title("gang wait by size")
    axes[1].set_title("gang wait by queue")
    for ax in axes:
        ax.set_ylabel("seconds")
        ax.legend(fontsize="small")
    save(fig, "waits")

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    for run in runs:
        axes[0].step(hours(run), run.stranded_gpus, where="post", label=run.setup)
        axes[1].step(hours(run), run.whole_gpu_nodes, where="post", label=run.setup)
    axes[0].set_title("stranded GPUs")
    axes[1].set_title("whole free GPU nodes")
    for ax in axes:
        ax.set_xlabel("hours")
        ax.legend()
    save(fig, "fragmentation")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run in runs:
        ax.step(hours(run), run.preempted, where="post", label=f"{run.setup} preempted")
        ax.step(
            hours(run), run.reclaimed, where="post", linestyle="--", label=f"{run.setup} reclaimed"
        )
    ax.set_title("pods evicted (cumulative)")
    ax.set_xlabel("hours")
    ax.legend()
    save(fig, "preemptions")

    queues = _queues(runs)
    if queues:
        fig, axes = plt.subplots(
            len(queues), 1, figsize=(9, 2.2 * len(queues)), sharex=True, squeeze=False
        )
        for ax, queue in zip(axes[:, 0], queues, strict=True):
            for run in runs:
                if queue in run.shares:
                    line = ax.step(
                        hours(run), run.shares[queue], where="post", label=f"{run.setup} share"
                    )
                    ax.step(
                        hours(run), run.ideal[queue], where="post", linestyle=":",
                        color=line[0].get_color(), label=f"{run.setup} ideal",
                    )  # fmt: skip
            ax.set_title(f"queue {queue}: share of GPUs")
            ax.set_ylim(0, 1.05)
            ax.legend(fontsize="small")
        axes[-1, 0].set_xlabel("hours")
        save(fig, "shares")
    return written


def write(runs: Sequence[Run], out: str | Path, *, title: str, inputs: Sequence[str]) -> Path:
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    plots(runs, directory)
    report = directory / "report.md"
    report.write_text(markdown(runs, title=title, inputs=inputs))
    return report
