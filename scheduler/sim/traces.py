"""Traces of job arrivals for ``gang-scheduler simulate``, and a generator of synthetic ones.

A trace is a list of jobs, each a gang: when it arrives (seconds from the start), its name,
its members and what each member asks for (GPUs, CPU, memory), how long it runs once bound,
its queue and priority. Written as JSON lines (one object a line) or CSV with a header::

    {"at": 0, "name": "j-1", "members": 2, "gpu": 8, "cpu": "32", "memory": "256Gi",
     "duration": 3600, "queue": "team-a", "priority": 0}

``generate`` makes one shaped like published GPU cluster traces (docs/simulate.md says which
statistics and where from): most jobs on one GPU, the rest at powers of two; durations
log-normal (a heavy tail: minutes typical, days possible); arrivals a Poisson process whose
rate follows the day (a sinusoid over 24 h). The same seed gives the same trace.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from scheduler.model import names

GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Job:
    """A gang to submit at ``at``: ``members`` pods asking for ``gpu``, ``cpu``, ``memory``
    each, bound together, running ``duration`` seconds once bound."""

    at: float
    name: str
    members: int
    gpu: int
    cpu: str = "4"
    memory: str = "32Gi"
    duration: float = 3600.0
    queue: str = ""
    priority: int = 0
    namespace: str = "sim"

    @property
    def gpus(self) -> int:
        return self.members * self.gpu


_FIELDS = tuple(f.name for f in fields(Job))
_NUMBERS = {"at": float, "members": int, "gpu": int, "duration": float, "priority": int}


def _job(raw: object, where: str) -> Job:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a job must be an object with the fields {list(_FIELDS)}")
    unknown = set(raw) - set(_FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; known: {list(_FIELDS)}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if value in (None, ""):
            continue
        try:
            values[key] = _NUMBERS[key](value) if key in _NUMBERS else str(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {key} must be a number, got {value!r}") from None
    for key in ("at", "name", "members", "gpu"):
        if key not in values:
            raise ValueError(f"{where}: {key} is required")
    job = Job(**values)
    if not (math.isfinite(job.at) and math.isfinite(job.duration)):
        raise ValueError(f"{where}: at and duration must be finite numbers of seconds")
    if job.members < 1 or job.gpu < 0 or job.duration <= 0 or job.at < 0:
        raise ValueError(f"{where}: members >= 1, gpu >= 0, duration > 0, at >= 0 please")
    return job


def _line(line: str, where: str) -> object:
    try:
        return json.loads(line)
    except ValueError as error:  # JSONDecodeError, or a number of over 4,300 digits
        raise ValueError(f"{where}: not JSON: {error}") from None
    except RecursionError:
        raise ValueError(f"{where}: not JSON: nested too deeply") from None


def read(path: str | Path) -> list[Job]:
    """A trace file: CSV (by its .csv suffix) or JSON lines. Sorted by arrival, then name."""
    text = Path(path).read_text()
    if str(path).endswith(".csv"):
        rows: Iterable[Mapping[str, Any]] = csv.DictReader(io.StringIO(text))
        jobs = [_job(row, f"{path}:{i + 2}") for i, row in enumerate(rows)]
    else:
        jobs = [
            _job(_line(line, f"{path}:{i + 1}"), f"{path}:{i + 1}")
            for i, line in enumerate(text.splitlines())
            if line.strip() and not line.lstrip().startswith("#")
        ]
    names_seen = [job.name for job in jobs]
    if len(set(names_seen)) != len(names_seen):
        raise ValueError(f"{path}: job names must be unique")
    return sorted(jobs, key=lambda j: (j.at, j.name))


def write(jobs: Sequence[Job], path: str | Path) -> None:
    if str(path).endswith(".csv"):
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=_FIELDS, lineterminator="\n")
        writer.writeheader()
        for job in jobs:
            writer.writerow(asdict(job))
        Path(path).write_text(out.getvalue())
    else:
        Path(path).write_text("".join(json.dumps(asdict(j)) + "\n" for j in jobs))


def pod_bodies(job: Job, *, gang: str, created: str, scheduler: str) -> list[dict[str, Any]]:
    """The pods of one incarnation of ``job`` as the API server would hold them: a gang by
    Koordinator's annotations (name, min-available), its queue by our label."""
    requests = {"cpu": job.cpu, "memory": job.memory}
    if job.gpu:
        requests[GPU] = str(job.gpu)
    labels = {names.QUEUE: job.queue} if job.queue else {}
    return [
        {
            "metadata": {
                "name": f"{gang}-{m}",
                "namespace": job.namespace,
                "uid": f"{job.namespace}/{gang}-{m}",
                "creationTimestamp": created,
                "labels": labels,
                "annotations": {
                    names.KOORD_NAME: gang,
                    names.KOORD_MIN_AVAILABLE: str(job.members),
                },
            },
            "spec": {
                "schedulerName": scheduler,
                "priority": job.priority,
                "containers": [{"name": "main", "resources": {"requests": requests}}],
            },
            "status": {"phase": "Pending"},
        }
        for m in range(job.members)
    ]


# -- the generator ---------------------------------------------------------------------------

# GPUs per job: most jobs on one GPU, the rest at powers of two, fewer the larger (the shape
# of Philly's and Helios's job-size distributions; the weights are ours: docs/simulate.md).
SIZE_WEIGHTS: tuple[tuple[int, float], ...] = (
    (1, 0.60),
    (2, 0.08),
    (4, 0.10),
    (8, 0.14),
    (16, 0.04),
    (32, 0.03),
    (64, 0.01),
)


@dataclass(frozen=True, slots=True)
class Shape:
    """What a generated trace looks like; the defaults are docs/simulate.md's."""

    hours: float = 24.0
    jobs_per_hour: float = 20.0  # on average over the day
    diurnal_amplitude: float = 0.5  # the rate swings between (1 - a) and (1 + a) times
    peak_hour: float = 14.0  # when the rate is highest (hours after the trace's start)
    duration_median: float = 1200.0  # seconds; log-normal
    duration_sigma: float = 1.6  # of the log: the tail (p99 is e^(2.33 sigma) times the median)
    duration_min: float = 30.0
    duration_max: float = 7 * DAY
    sizes: tuple[tuple[int, float], ...] = SIZE_WEIGHTS
    gpus_per_node: int = GPUS_PER_NODE
    cpu_per_gpu: int = 4
    memory_per_gpu_gi: int = 32
    queues: tuple[tuple[str, float], ...] = ()  # (name, share of jobs); () for no queue
    priorities: tuple[tuple[int, float], ...] = ((0, 1.0),)

    def __post_init__(self) -> None:
        """A shape that would make nothing, or never end, says which number is wrong."""
        positive = {
            "hours": self.hours,
            "jobs per hour": self.jobs_per_hour,
            "duration median": self.duration_median,
        }
        for what, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{what} must be a positive number, got {value!r}")
        if not (math.isfinite(self.duration_sigma) and self.duration_sigma >= 0):
            raise ValueError(f"duration sigma must be 0 or more, got {self.duration_sigma!r}")
        if not 0 <= self.diurnal_amplitude <= 1:
            raise ValueError(
                f"diurnal amplitude must be from 0 to 1, got {self.diurnal_amplitude!r}"
            )
        for name, share in self.queues:
            if not name or not (math.isfinite(share) and share > 0):
                raise ValueError(f"queue shares are NAME=SHARE with SHARE > 0, got {name}={share}")


def rate_at(t: float, shape: Shape) -> float:
    """Arrivals a second at ``t`` seconds from the start."""
    mean = shape.jobs_per_hour / 3600.0
    phase = 2 * math.pi * (t / DAY - shape.peak_hour / 24.0)
    return mean * (1 + shape.diurnal_amplitude * math.cos(phase))


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    values, weights = zip(*weighted, strict=True)
    return rng.choices(values, weights=weights)[0]


def generate(*, seed: int, shape: Shape = Shape()) -> list[Job]:
    """A synthetic trace: a non-homogeneous Poisson process (thinning, Lewis and Shedler),
    job sizes from ``shape.sizes``, log-normal durations clipped to [min, max]."""
    rng = random.Random(seed)
    peak = shape.jobs_per_hour / 3600.0 * (1 + shape.diurnal_amplitude)
    end = shape.hours * 3600.0
    jobs: list[Job] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= end:
            break
        if rng.random() * peak > rate_at(t, shape):
            continue  # thinned: the rate is below its peak now
        gpus = _pick(rng, shape.sizes)
        per_member = min(gpus, shape.gpus_per_node) if gpus else 0
        members = max(gpus // per_member, 1) if per_member else 1
        duration = rng.lognormvariate(math.log(shape.duration_median), shape.duration_sigma)
        duration = min(max(duration, shape.duration_min), shape.duration_max)
        queue = _pick(rng, shape.queues) if shape.queues else ""
        jobs.append(
            Job(
                at=round(t, 3),
                name=f"job-{len(jobs) + 1:05d}",
                members=members,
                gpu=per_member,
                cpu=str(max(per_member, 1) * shape.cpu_per_gpu),
                memory=f"{max(per_member, 1) * shape.memory_per_gpu_gi}Gi",
                duration=round(duration, 1),
                queue=queue,
                priority=_pick(rng, shape.priorities),
            )
        )
    return jobs
