"""kopf's frame runs beside the scheduling loop and never ends it: a task of kopf's that
fails (its discovery of the API cut mid-answer, as when the API server restarts) fails the
frame alone, which starts again, while the scheduling loop's tasks go on. Real kopf,
against a real HTTP server on localhost playing the API server's discovery."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

from aiohttp import web

from e2e.fixtures import healthz
from scheduler.frame import Frame, Runtime
from scheduler.shell.api import ApiClient, Credentials
from scheduler.shell.health import Health
from testbed.cluster import free_port
from tests.unit.servers import listening

DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis": {"kind": "APIGroupList", "groups": []},
    "/version": {"major": "1", "minor": "37"},
}


async def _until(check: Callable[[], bool], *, timeout: float) -> bool:
    for _ in range(int(timeout / 0.1)):
        if await asyncio.to_thread(check):
            return True
        await asyncio.sleep(0.1)
    return False


def test_a_frame_whose_discovery_is_cut_mid_answer_starts_again_and_scheduling_goes_on() -> None:
    cut: list[str] = []

    async def discovery(request: web.Request) -> web.StreamResponse:
        if request.path == "/apis" and not cut:
            # The API server goes away mid-body: kopf reads the body outside its retries.
            cut.append(request.path)
            answer = web.StreamResponse(headers={"Content-Type": "application/json"})
            answer.content_length = 4096
            await answer.prepare(request)
            await answer.write(b'{"kind": "APIGroupList", "groups": [')
            assert request.transport is not None
            request.transport.close()
            return answer
        return web.json_response(DISCOVERY.get(request.path, {}))

    async def scenario() -> tuple[bool, bool, int, bool]:
        async with listening(discovery) as credentials:
            return await _run(credentials)

    async def _run(credentials: Credentials) -> tuple[bool, bool, int, bool]:
        api = ApiClient(credentials)
        probe = free_port()
        failures: list[int] = []
        frame = Frame(
            credentials=credentials,
            runtime=Runtime(health=Health(api), scheduling=asyncio.get_running_loop()),
            liveness_endpoint=f"http://127.0.0.1:{probe}/healthz",
            errored=lambda: failures.append(1),
            pauses=itertools.repeat(0.2),
        )
        try:
            frame.start()
            # A task of the scheduling loop's, made after the frame started: a bind, say.
            binding = asyncio.create_task(asyncio.sleep(3600), name="a bind in flight")
            failed = await _until(lambda: bool(failures), timeout=20)
            answered = await _until(lambda: healthz(probe) == 200, timeout=20)
            alive = not binding.done()
            # kopf ended by a failure, not by its stop flag, schedules a SIGKILL of its
            # thread (the process) on its loop, which the next run of the frame shares.
            killing = _kill_timers(frame._loop)
            binding.cancel()
            await frame.stop()
            return answered, failed, healthz(probe), alive and not killing
        finally:
            await api.close()

    answered, failed, after_stop, alive = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert failed, "the cut discovery never failed the frame: the test shows nothing"
    assert answered, "/healthz never answered 200 after the frame failed"
    assert alive, "a task of the scheduling loop's was ended, or the process is to be killed"
    assert after_stop == 0, "/healthz still answered once the frame was stopped"


def _kill_timers(loop: asyncio.AbstractEventLoop | None) -> list[object]:
    scheduled = getattr(loop, "_scheduled", [])
    return [t for t in list(scheduled) if "pthread_kill" in repr(t)]


def test_the_health_check_runs_on_the_scheduling_loop() -> None:
    """Asked from kopf's thread while the scheduling loop is stuck, the check waits for it
    (kopf keeps an answer 10 s; past that the kubelet's timeout fails the probe), as when
    kopf served /healthz on that loop."""

    async def scenario() -> tuple[float, float, float, list[str]]:
        api = ApiClient(Credentials(server="http://127.0.0.1:9", verify=False))
        runtime = Runtime(health=Health(api), scheduling=asyncio.get_running_loop())
        try:
            asked = asyncio.get_running_loop().run_in_executor(None, _timed_check, runtime)
            time.sleep(1.0)  # the scheduling loop stuck (holding its thread)
            freed = time.monotonic()
            sent, problems, came = await asked
            return sent, freed, came, problems
        finally:
            await api.close()

    sent, freed, came, problems = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert sent < freed, "the check was asked only once the loop was free: the test shows nothing"
    assert came >= freed, "the check was answered while the scheduling loop was stuck"
    assert problems == []


def _timed_check(runtime: Runtime) -> tuple[float, list[str], float]:
    """When the check was asked (on a loop of its own, as kopf's frame asks), what it
    found, and when it came back."""
    sent = time.monotonic()
    problems = asyncio.run(runtime.problems())
    return sent, problems, time.monotonic()
