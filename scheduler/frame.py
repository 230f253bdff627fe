"""kopf's frame (the liveness probe and its login), on an event loop of its own, in a thread.

kopf takes every task created on its event loop after it started as its own: when it ends,
it waits 5 s for them and cancels the rest. On the scheduling loop those are binds in
flight, a volume wait, the Events being posted: a task of kopf's that failed (its first
discovery of the API, cut mid-answer by an API server restart, is not retried) ended the
scheduler, and kopf's wind-down cancelled a gang's binds half way. On a loop of its own,
kopf's end touches only kopf: a failure is logged and counted, the frame starts again after
a pause, and scheduling goes on.

The process's signals stay with the scheduling loop (kopf installs none off the main
thread), whose stop flag stops the frame after everything else. /healthz is still answered
on the scheduling loop, so it fails while that loop is stuck, as it did when kopf ran there.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

from scheduler.shell.api import Credentials
from scheduler.shell.health import Health

if TYPE_CHECKING:
    import kopf

log = structlog.get_logger()

# How long a stop waits for kopf to wind down (it takes well under a second; a frame stuck
# in a handler must not hold the process's exit).
STOP_SECONDS = 5.0


def _load_kopf() -> ModuleType:
    """kopf, imported in the frame's thread while the scheduling loop runs.

    kopf imports the pykube and kubernetes clients when they are installed, only to know
    their objects in helpers we never call (adopt, owner references): about a fifth of a
    second more. They are hidden from it while it loads (a module that is None in
    sys.modules cannot be imported), unless already imported."""
    hidden = [name for name in ("pykube", "kubernetes") if name not in sys.modules]
    sys.modules.update(dict.fromkeys(hidden))
    try:
        import kopf  # noqa: PLC0415

        return kopf
    finally:
        for name in hidden:
            del sys.modules[name]


class _Forever:
    """Retry delays without end (kopf iterates them afresh for every request)."""

    def __iter__(self) -> Iterator[float]:
        yield from (1, 1, 2, 3, 5)
        yield from itertools.repeat(5)


class _OffMainThread(logging.Filter):
    """kopf warns that it ignores the process's signals off the main thread: here that is
    the design (the scheduling loop has them), not news for the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("OS signals are ignored")


_OFF_MAIN_THREAD = _OffMainThread()  # one filter, however many frames a process starts


@dataclass(frozen=True)
class Runtime:
    """What kopf's handlers share (kopf's memo, so there is no global state)."""

    health: Health
    scheduling: asyncio.AbstractEventLoop

    async def problems(self) -> list[str]:
        """The health check, run on the scheduling loop: a loop stuck for longer than the
        probe's timeout fails the probe."""

        async def check() -> list[str]:
            return self.health.problems()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(check(), self.scheduling))


def kopf_settings(kopf: ModuleType) -> kopf.OperatorSettings:
    """kopf's settings for one run of the frame, made before it starts (a startup handler
    would set them only once kopf's first tasks are running)."""
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # our Events are our own; kopf's would be noise
    # kopf watches nothing of ours, so it need not watch CRDs for new kinds either: that
    # watch is a task kopf cannot do without, and it dies once its retries run out.
    settings.scanning.disabled = True
    # kopf gives a failed request 8 retries (about a minute) and then fails the task, which
    # ends the frame: its start-up discovery must retry as long as it takes.
    settings.networking.error_backoffs = _Forever()
    # kopf ended other than by its stop flag (a failed task) kills the thread it ran on
    # (the process: SIGKILL) this long after, from a timer on the frame's loop, which the
    # next run of the frame keeps: the frame starts again instead.
    settings.process.ultimate_exiting_timeout = None
    return settings


def build_registry(credentials: Credentials, *, kopf: ModuleType) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=credentials.server,
            ca_path=credentials.ca_file,
            certificate_path=credentials.cert_file,
            private_key_path=credentials.key_file,
            token=credentials.bearer(),
            insecure=not credentials.verify,
        )

    @kopf.on.probe(id="health", registry=registry)
    async def health(memo: Runtime, **_: Any) -> str:
        problems = await memo.problems()
        if problems:
            raise kopf.PermanentError("; ".join(problems))
        return "ok"

    return registry


class Frame:
    """kopf, run (and run again after a failure) in a thread until ``stop``."""

    def __init__(
        self,
        *,
        credentials: Credentials,
        runtime: Runtime,
        liveness_endpoint: str | None,
        errored: Callable[[], None] = lambda: None,
        pauses: Iterator[float] | None = None,
    ) -> None:
        self._credentials = credentials
        self._runtime = runtime
        self._liveness_endpoint = liveness_endpoint
        self._errored = errored
        self._pauses = pauses or iter(_Forever())
        self._requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run_thread, name="kopf frame", daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def stop(self, *, timeout: float = STOP_SECONDS) -> None:
        """Stop kopf (through its stop flag: no SIGKILL scheduled, no hung tasks) and wait
        for its thread, at most ``timeout`` seconds."""
        self._requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                loop.call_soon_threadsafe(stopping.set)
        if self._thread.ident is None:
            return  # never started
        await asyncio.to_thread(self._thread.join, timeout)
        if self._thread.is_alive():
            log.warning("kopf's frame did not stop in time; exiting without it", seconds=timeout)

    def _run_thread(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception:
            log.exception("kopf's frame ended unexpectedly; /healthz is not served")
            self._errored()

    async def _run(self) -> None:
        self._stopping = stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._requested.is_set():  # stopped before the loop was there to be told
            return
        kopf = _load_kopf()
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("kopf._core.reactor.running").addFilter(_OFF_MAIN_THREAD)
        registry = build_registry(self._credentials, kopf=kopf)
        while True:
            ended = "by itself"
            try:
                await kopf.operator(
                    registry=registry,
                    settings=kopf_settings(kopf),
                    clusterwide=True,
                    standalone=True,
                    memo=self._runtime,
                    stop_flag=stopping,
                    liveness_endpoint=self._liveness_endpoint,
                )
            except Exception as error:  # a root task of kopf's failed: kopf logged which
                ended = repr(error)
            if stopping.is_set():
                return
            pause = next(self._pauses)
            self._errored()
            log.warning("kopf's frame ended; it starts again", error=ended, after=pause)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), pause)
