"""What one scheduler process does in one workload of ``make bench``, read while it runs:
its CPU seconds and peak RSS over time (from /proc, ten times a second), and from the API
server's audit log its requests and when its last write landed.

The window a scheduler is timed in ends at its last bind, and again at its last write of
the workload: Events, PodGroup status and pod conditions may come after the binds (ours
defer Events and status while binds are in flight), and CPU and requests are compared to the
same end. The last write is known only once the scheduler has been quiet for a while
(``quiescence``): the figures are read at the last write, from the samples, not at the end
of the quiet wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench import audit

# Our metrics the bench reports, by the figure's name.
SCRAPED = {
    "gang_scheduler_pass_duration_seconds_count": "passes",
    "gang_scheduler_pass_duration_seconds_sum": "pass_seconds",
    "gang_scheduler_events_dropped_total": "events_dropped",
}
_STAMP = re.compile(rb'"requestReceivedTimestamp":"([^"]+)"')
_RESOURCE = re.compile(rb'"objectRef":\{[^}]*?"resource":"([^"]+)"')
_WRITE = re.compile(rb'"verb":"(?:create|update|patch|delete|deletecollection)"')
_INFRASTRUCTURE = tuple(f'"userAgent":"{a}/'.encode() for a in audit.INFRASTRUCTURE)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of the process so far (fields 14 and 15 of /proc/pid/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def last_writes(lines: list[bytes]) -> dict[str, str]:
    """The latest request-received stamp of a write by the scheduler under test among audit
    log lines, by resource (``events``, ``podgroups``, ``pods``), without decoding the JSON
    (the stamps are RFC 3339 in UTC with microseconds, one width: they sort as text). The
    audit log holds every client's requests; this runs while the scheduler is timed, so it
    stays cheap."""
    latest: dict[str, bytes] = {}
    for line in lines:
        if any(agent in line for agent in _INFRASTRUCTURE) or not _WRITE.search(line):
            continue
        stamp, resource = _STAMP.search(line), _RESOURCE.search(line)
        if stamp and resource:
            kind = resource[1].decode()
            if kind not in latest or stamp[1] > latest[kind]:
                latest[kind] = stamp[1]
    return {kind: stamp.decode() for kind, stamp in latest.items()}


@dataclass
class Meter:
    """Started with the scheduler process; ``audit_log`` is None when the control plane
    keeps none (then no requests and no last write are reported)."""

    process: subprocess.Popen[bytes]
    audit_log: Path | None
    # Where the scheduler serves Prometheus metrics (ours), or None (the peers: their
    # secure port is off in the bench).
    metrics_port: int | None = None
    started: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    _wall: float = field(default_factory=lambda: time.time() - time.monotonic())
    _offset: int = 0
    _read: int = 0
    _rest: bytes = b""
    _last_writes: dict[str, str] = field(default_factory=dict)
    _task: asyncio.Task | None = None

    def __post_init__(self) -> None:
        if self.audit_log is not None and self.audit_log.exists():
            self._offset = self._read = self.audit_log.stat().st_size

    def start(self) -> Meter:
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    async def _sample(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                pid = self.process.pid
                self.samples.append((time.monotonic(), cpu_seconds(pid), peak_rss_mib(pid)))
            await asyncio.sleep(0.1)

    def _scan(self) -> None:
        """Read what the audit log gained, keep the scheduler's latest write."""
        if self.audit_log is None or not self.audit_log.exists():
            return
        with self.audit_log.open("rb") as f:
            f.seek(self._read)
            data = f.read()
        self._read += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for kind, stamp in last_writes(lines).items():
            if stamp > self._last_writes.get(kind, ""):
                self._last_writes[kind] = stamp

    def last_write(self, resource: str | None = None) -> float | None:
        """When the scheduler's last write so far (of ``resource``, or of any) was received
        (monotonic seconds)."""
        self._scan()
        stamps = [s for k, s in self._last_writes.items() if resource in (None, k)]
        if not stamps:
            return None
        return audit.parse_stamp(max(stamps)) - self._wall

    async def quiescence(self, *, after: float, quiet: float, cap: float) -> float | None:
        """The scheduler's last write once it has written nothing for ``quiet`` seconds
        after ``after`` (its last bind); None if it is still writing ``cap`` seconds after
        ``after``, or if there is no audit log."""
        if self.audit_log is None:
            return None
        while True:
            last = self.last_write()
            now = time.monotonic()
            if now - max(last or after, after) >= quiet:
                return last if last is not None else after
            if now - after > cap:
                return None
            await asyncio.sleep(0.2)

    def at(self, moment: float) -> dict:
        """CPU seconds and peak RSS at ``moment``: the first sample taken then or later."""
        for when, cpu, rss in self.samples:
            if when >= moment:
                return {"cpu_seconds": round(cpu, 2), "peak_rss_mib": round(rss, 1)}
        if not self.samples:
            return {}
        _, cpu, rss = self.samples[-1]
        return {"cpu_seconds": round(cpu, 2), "peak_rss_mib": round(rss, 1)}

    def scrape(self) -> dict:
        """From our metrics: passes run, their seconds in all, Events dropped (the
        recorder's backlog was full). Blocking: run it in a thread."""
        if self.metrics_port is None:
            return {}
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return {}
        found = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in SCRAPED:
                found[SCRAPED[name]] = round(float(value), 3)
        return found

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def requests(self, *, until: float) -> dict:
        """The scheduler's requests the API server received from its start to ``until``
        (monotonic), by verb and resource. Read once the scheduler has stopped: a watch is
        logged when it ends."""
        if self.audit_log is None or not self.audit_log.exists():
            return {}
        with self.audit_log.open("rb") as f:
            f.seek(self._offset)
            lines = f.read().decode(errors="replace").splitlines()
        mine = audit.schedulers([r for r in map(audit.parse, lines) if r is not None])
        return audit.by_verb_and_resource(
            mine, since=self.started + self._wall, until=until + self._wall
        )
