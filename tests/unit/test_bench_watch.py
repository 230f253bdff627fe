"""The bench's watch (bench/watching.py, under run.py's bind watch) outlives the API server
ending its stream: it resumes from the last resourceVersion, and lists again on 410 Gone (as
an HTTP answer or as an ERROR event) or after failures in a row, so a bench run never waits
out its timeout for binds it could no longer see."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from aiohttp import web

from bench.apiserver import clear_namespace, settled
from bench.invariants import Invariants
from bench.metering import Meter
from bench.run import (
    Broken,
    Setting,
    Unfinished,
    _all_bound,
    fresh,
    markdown,
    partial,
    watched_ceiling,
)
from bench.runs import Results, Run
from bench.schedulers import Contender
from bench.watching import FAILURES_BEFORE_LIST, BindWatch, Following
from tests.unit.test_api_failures import server


def pod(name: str, version: int, node: str = "n-1") -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(version)}, "spec": {"nodeName": node}}


def test_the_watch_resumes_after_the_stream_ends_and_lists_again_on_gone() -> None:
    seen: list[str] = []
    lists = iter([
        {"metadata": {"resourceVersion": "1"}, "items": []},
        {"metadata": {"resourceVersion": "5"}, "items": [pod("a", 2), pod("b", 4)]},
        {"metadata": {"resourceVersion": "7"}, "items": [pod("a", 2), pod("b", 4), pod("c", 6)]},
    ])  # fmt: skip

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            seen.append("list")
            return web.json_response(next(lists))
        version = request.query["resourceVersion"]
        seen.append(f"watch@{version}")
        if version == "3":
            return web.json_response({"code": 410, "reason": "Expired"}, status=410)
        response = web.StreamResponse()
        await response.prepare(request)
        if version == "1":  # one bind, then the server ends the stream
            event = {"type": "MODIFIED", "object": pod("a", 2)}
            await response.write(json.dumps(event).encode() + b"\n")
            event = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}}
            await response.write(json.dumps(event).encode() + b"\n")
        elif version == "5":  # Gone, as an event in the stream
            event = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}
            await response.write(json.dumps(event).encode() + b"\n")
        else:  # quiet until the watch is stopped (or ends again, to be resumed again)
            await asyncio.sleep(0.5)
        return response

    async def scenario() -> BindWatch:
        async with server(handler) as api:
            watch = BindWatch(api, "bench").start()
            try:
                await watch.wait_for(3, timeout=10)
            finally:
                await watch.stop()
            return watch

    watch = asyncio.run(scenario())
    assert set(watch.bound_at) == {"a", "b", "c"}
    assert seen[:7] == ["list", "watch@1", "watch@3", "list", "watch@5", "list", "watch@7"]
    assert watch.relisted == 2
    assert watch.resumed >= 1


def test_a_watch_failing_time_after_time_is_given_up_for_a_list_handed_over_whole() -> None:
    """The API server away: after a few failed watches in a row the collection is listed
    again (its resourceVersion may be compacted by then), and the follower gets that list
    whole, to reconcile what went away unseen."""
    lists = iter([
        {"metadata": {"resourceVersion": "1"}, "items": [pod("a", 1)]},
        {"metadata": {"resourceVersion": "9"}, "items": [pod("b", 8)]},
    ])  # fmt: skip
    watches: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            return web.json_response(next(lists))
        watches.append(request.query["resourceVersion"])
        if request.query["resourceVersion"] == "1":
            return web.json_response({"code": 500, "reason": "InternalError"}, status=500)
        await asyncio.sleep(0.5)
        return web.StreamResponse()

    got: list[list[str]] = []

    async def scenario() -> Following:
        async with server(handler) as api:
            following = Following(
                api,
                "/api/v1/namespaces/bench/pods",
                listed=lambda items: got.append([i["metadata"]["name"] for i in items]),
                changed=lambda kind, obj: None,
            )
            task = asyncio.get_running_loop().create_task(following.run())
            try:
                while len(got) < 2 and not task.done():
                    await asyncio.sleep(0.05)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            return following

    following = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert got == [["a"], ["b"]]
    assert watches[: FAILURES_BEFORE_LIST + 1] == ["1"] * (FAILURES_BEFORE_LIST + 1)
    assert following.relisted == 1
    assert following.version == "9"


def test_a_backlog_waits_for_the_first_list_and_hears_of_its_failure() -> None:
    """A backlog starts the scheduler only once the bench's own LIST is in (it would share
    the API server and the cores with the scheduler's start); a LIST that fails says so
    rather than leaving the backlog to wait."""
    answers = iter([
        web.json_response({"code": 403, "reason": "Forbidden"}, status=403),
        web.json_response({"metadata": {"resourceVersion": "1"}, "items": [pod("a", 1)]}),
    ])  # fmt: skip

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "1":
            await asyncio.sleep(0.5)
            return web.json_response({})
        return next(answers)

    async def scenario() -> tuple[str, set[str]]:
        async with server(handler) as api:
            failed = BindWatch(api, "bench").start()
            try:
                await failed.until_listed(timeout=10)
                error = "none"
            except Exception as raised:  # what it was is the assertion
                error = type(raised).__name__
            watch = await BindWatch(api, "bench").start().until_listed(timeout=10)
            await watch.stop()
            return error, set(watch.bound_at)

    error, bound = asyncio.run(scenario())
    assert error == "ApiError"
    assert bound == {"a"}


def test_a_scheduler_that_runs_out_of_time_leaves_how_far_it_got_in_the_results() -> None:
    # A child that says it is up has exec'd and touched its memory: read right after the
    # fork, its peak RSS may still be 0 (CI saw that once with `sleep`).
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"up\n"
        figures = partial({"p-0": 10.5, "p-1": 11.0}, 8, 10.0, process)
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
    assert figures["pods_bound"] == 2
    assert figures["pods"] == 8
    assert figures["start_to_first_bind_seconds"] == 0.5
    assert figures["cpu_seconds"] >= 0
    assert figures["peak_rss_mib"] > 0
    cell = Run({"error": "TimeoutError: waiting for 8 binds", **figures}).got()
    assert cell.startswith("TimeoutError: waiting for 8 binds; 2 of 8 pods bound; ")
    assert "first bind after 0.5 s" in cell
    assert "CPU s, peak RSS" in cell


def test_a_scheduler_that_exited_and_bound_nothing_says_only_that() -> None:
    process = subprocess.Popen(["true"])
    process.wait()
    figures = partial({}, 8, 10.0, process)
    assert figures == {"pods_bound": 0, "pods": 8}
    assert Run({"error": "TimeoutError: x", **figures}).got() == (
        "TimeoutError: x; 0 of 8 pods bound"
    )


def test_settling_waits_for_deletes_to_stop_and_gives_up_on_metrics_it_may_not_read() -> None:
    """Between workloads the bench waits until KWOK's DELETEs stop; an API server that
    refuses its metrics must not fail the run."""
    counts = iter([1, 5, 9, 9])
    sample = 'apiserver_request_total{{code="200",resource="pods",verb="DELETE"}} {}\n'
    asked: list[str] = []

    async def counting(request: web.Request) -> web.StreamResponse:
        asked.append(request.path)
        return web.Response(text=sample.format(next(counts)))

    async def refusing(request: web.Request) -> web.StreamResponse:
        asked.append("refused")
        return web.json_response({"code": 403, "reason": "Forbidden"}, status=403)

    async def scenario() -> None:
        async with server(counting) as api:
            await settled(api, timeout=10)
        async with server(refusing) as api:
            await settled(api, timeout=10)

    asyncio.run(scenario())
    assert asked == ["/metrics"] * 4 + ["refused"]


def run_of(**schedulers: str) -> dict:
    """What a run says of itself, before its figures: 10 nodes, these schedulers (by key:
    label)."""
    return {
        "nodes": 10,
        "machine": "2 cores",
        "concurrency": 32,
        "client": {"qps": 5000, "burst": 5000},
        "schedulers": {k: {"label": label, "version": "v1"} for k, label in schedulers.items()},
    }


def test_the_table_gives_first_to_last_bind_against_the_plain_and_the_watched_ceiling() -> None:
    results = {
        **run_of(gang="gang-scheduler"),
        "bind_ceiling": {"pods": 100, "seconds": 0.1, "pods_per_second": 1000.0},
        "bind_ceiling_watched": {
            "pods": 100,
            "seconds": 0.125,
            "pods_per_second": 800.0,
            "pods_per_second_first_to_last_bind": 900.0,
        },
        "workloads": {
            "backlog_gangs_of_8": {
                "gang": {"pods_per_second": 500.0, "pods_per_second_first_to_last_bind": 720.0}
            }
        },
    }
    table = markdown(Results.from_json(results))
    assert "800 pods/s by its POSTs, 900 pods/s first to last bind" in table
    row = next(line for line in table.splitlines() if line.startswith("| gang-scheduler | 500"))
    assert "| 0.5 | 0.72 | 0.8 |" in row  # 500 / 1000, 720 / 1000, then 720 / 900


def round_of(ceiling: float, ours: float, theirs: float, *, order: list[str]) -> dict:
    return {
        "order": order,
        "bind_ceiling": {"pods": 100, "seconds": 0.1, "pods_per_second": ceiling},
        "workloads": {
            "backlog_gangs_of_8": {
                "gang": {"pods_per_second": ours},
                "cos": {"pods_per_second": theirs},
            }
        },
    }


def test_rounds_give_medians_with_ranges_and_claim_a_ratio_only_when_ranges_are_apart() -> None:
    results = {
        **run_of(gang="gang-scheduler", cos="Coscheduling"),
        "rounds": [
            round_of(1000, 600, 300, order=["gang", "cos"]),
            round_of(800, 400, 350, order=["cos", "gang"]),
            round_of(900, 500, 250, order=["gang", "cos"]),
        ],
    }
    table = markdown(Results.from_json(results))
    assert "**3 rounds**" in table
    assert "gang-scheduler → Coscheduling; Coscheduling → gang-scheduler" in table
    assert "at 900 (800 to 1000) pods/s" in table
    ours = next(line for line in table.splitlines() if line.startswith("| gang-scheduler | 500"))
    # Each round's ratio to its own ceiling: 0.6, 0.5, 0.56; to the peer's run of the same
    # round: 2, 1.14, 2; our 400..600 overlaps their 250..350? No: apart, so it is claimed.
    assert "| 500 (400 to 600) |" in ours
    assert "| 0.56 (0.5 to 0.6) |" in ours
    assert ours.endswith("| 1 (1 to 1) | 2 (1.14 to 2) |")
    results["rounds"][1]["workloads"]["backlog_gangs_of_8"]["cos"]["pods_per_second"] = 450
    table = markdown(Results.from_json(results))
    ours = next(line for line in table.splitlines() if line.startswith("| gang-scheduler | 500"))
    assert ours.endswith("| 2 (0.89 to 2), ranges overlap |")


def test_a_round_that_failed_is_said_in_the_row() -> None:
    results = {
        **run_of(gang="gang-scheduler"),
        "rounds": [
            {"workloads": {"backlog_gangs_of_8": {"gang": {"pods_per_second": 1.0}}}},
            {"workloads": {"backlog_gangs_of_8": {"gang": {"error": "Broken: gang g3 ..."}}}},
        ],
    }
    assert "| gang-scheduler | failed (round 2: Broken: gang g3 ...) |" in markdown(
        Results.from_json(results)
    )


def test_a_watched_ceiling_whose_watch_is_refused_is_left_out_not_the_run(tmp_path: Path) -> None:
    """The targets are against the plain ceiling: a bench whose pod LIST is refused (403)
    goes on without the watched one, its namespace left to be cleared before the next
    workload."""
    binds: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/metrics":
            return web.Response(text="")
        if request.method == "POST" and request.path.endswith("/binding"):
            binds.append(request.path)
        if request.method in {"POST", "DELETE"}:
            return web.json_response({}, status=201 if request.method == "POST" else 200)
        if request.query.get("limit") == "1":  # clear_namespace: none left
            return web.json_response({"items": []})
        return web.json_response({"reason": "Forbidden", "message": "no list"}, status=403)

    async def scenario() -> tuple[dict | None, list[str]]:
        async with server(handler) as api:
            setting = Setting(api=api, nodes=("n0",), logs=tmp_path, concurrency=2, timeout=5)
            return await watched_ceiling(setting, pods=2), setting.left

    watched, left = asyncio.run(scenario())
    assert watched is None
    assert [n.startswith("bench-ceiling-") for n in left] == [True]
    assert binds == []  # the watch failed before the binds: nothing half measured


def _scraped(answer: bytes) -> dict:
    """What the meter scrapes from a metrics endpoint that answers ``answer`` (raw HTTP)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer_once() -> None:
        connection, _ = listener.accept()
        connection.recv(4096)
        connection.sendall(answer)
        connection.close()

    thread = threading.Thread(target=answer_once, daemon=True)
    thread.start()
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        meter = Meter(process, None, metrics_port=listener.getsockname()[1])
        return meter.scrape()
    finally:
        process.wait()
        thread.join(5)
        listener.close()


def test_the_meter_reads_our_pass_count_and_skips_a_value_that_is_not_a_number() -> None:
    body = b"gang_scheduler_pass_duration_seconds_count 12\ngang_scheduler_events_dropped_total x\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert _scraped(head + body) == {"passes": 12.0}


def test_the_meter_scrapes_nothing_from_an_answer_cut_off_midway() -> None:
    assert _scraped(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\nshort") == {}


def _clearing(left: list[int], *, timeout: float) -> str:
    """clear_namespace against an API server whose namespace lists ``left[0]`` pods, then
    ``left[1]``... (the last one for good): what it did ("cleared" or its error)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/metrics":
            return web.Response(text="")
        if request.method == "DELETE":
            return web.json_response({})
        count = left.pop(0) if len(left) > 1 else left[0]
        items = [{"metadata": {"name": "p"}}] if count else []
        more = {"remainingItemCount": count - 1} if count > 1 else {}
        return web.json_response({"metadata": more, "items": items})

    async def scenario() -> str:
        async with server(handler) as api:
            try:
                await clear_namespace(api, "ns", timeout=timeout)
            except TimeoutError as error:
                return str(error)
            return "cleared"

    return asyncio.run(scenario())


def test_clearing_waits_as_long_as_pods_keep_going_and_no_longer_once_they_stop() -> None:
    """60,000 pods took more than 300 s to go at 10,000 nodes, and the figures measured
    before were lost with the timeout: the bound is on a wait in which none goes."""
    assert _clearing([9000, 7000, 5000, 3000, 1000, 0], timeout=0.6) == "cleared"  # ~2.5 s
    assert _clearing([9000, 7000, 7000], timeout=0.6) == (
        "7000 pods in ns not gone; none went for 0.6s"
    )


def test_a_workloads_namespace_is_cleared_before_the_next_one_is_made(tmp_path: Path) -> None:
    """The last workload of a run is never cleared (its control plane goes down with it);
    any other is, before the next workload's namespace is made."""
    calls: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        calls.append(f"{request.method} {request.path}")
        if request.query.get("limit") == "1":  # clear_namespace: none left
            return web.json_response({"items": []})
        return web.json_response({}, status=201 if request.method == "POST" else 200)

    async def scenario() -> tuple[str, list[str]]:
        async with server(handler) as api:
            setting = Setting(api=api, nodes=("n0",), logs=tmp_path, concurrency=2, timeout=5)
            setting.left.append("gangs-ours-0")
            return await fresh(setting, "next"), setting.left

    made, left = asyncio.run(scenario())
    assert made.startswith("next-")
    assert left == []
    deleted = calls.index("DELETE /api/v1/namespaces/gangs-ours-0/pods")
    assert deleted < calls.index("POST /api/v1/namespaces")


def test_a_scheduler_out_of_time_is_unfinished_unless_it_left_a_gang_partly_bound() -> None:
    """A timeout reports how far the scheduler got; a gang it left partly bound is Broken
    (the bench smoke lets a slow peer off, never a broken one)."""
    contender = Contender(
        key="peer", label="Peer", scheduler_name="peer", version="0", argv=(), gang_api="ours"
    )
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()

    async def scenario(bound: list[str]) -> Exception:
        invariants = Invariants(
            allocatable={"n0": {"cpu": 8000}},
            gangs={"g0": ["g0-0", "g0-1"], "g1": ["g1-0", "g1-1"]},
            minimum={"g0": 2, "g1": 2},
            partial_limit=0.1,
        )
        watch = BindWatch(api=None, namespace="ns", invariants=invariants)  # type: ignore[arg-type]
        for pod in bound:
            watch.bound_at[pod] = time.monotonic()
            invariants.bound(pod, node="n0", requests={"cpu": 1000}, at=watch.bound_at[pod])
        try:
            await _all_bound(
                watch, invariants=invariants, contender=contender, started=0.0,
                scheduler=process, pods=4, timeout=0.01,
            )  # fmt: skip
        except (Unfinished, Broken) as ended:
            return ended
        raise AssertionError("4 pods were never bound, yet the wait ended without an error")

    slow = asyncio.run(scenario(["g0-0", "g0-1"]))
    assert isinstance(slow, Unfinished)
    assert (slow.figures["pods_bound"], slow.figures["pods"]) == (2, 4)
    assert isinstance(asyncio.run(scenario(["g0-0", "g0-1", "g1-0"])), Broken)
