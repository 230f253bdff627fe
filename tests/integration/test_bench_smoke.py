"""A smoke run of ``make bench``: tiny sizes, every scheduler (us and both peers), and only
one check, that every gang ends whole. It keeps the bench runnable: a peer that no longer
starts, a workload that no longer finishes, a watch that hangs, all fail here, not in the
middle of a long bench run."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.run import main_async, parse
from bench.schedulers import PeerMissing
from e2e.cluster import REPO

pytestmark = pytest.mark.local_control_plane

SMOKE_DIR = REPO / ".cluster-bench-smoke"


def test_every_scheduler_of_the_bench_ends_every_gang_whole() -> None:
    args = parse(
        ["--smoke", "--nodes", "16", "--pods", "32", "--latency-pods", "32",
         "--latency-rate", "50", "--timeout", "30", "--contention-timeout", "30",
         "--settle", "0.5", "--rounds", "1", "--quiet", "2", "--quiet-cap", "20"]
    )  # fmt: skip
    started = time.monotonic()
    try:
        results = asyncio.run(main_async(args, directory=SMOKE_DIR))
    except PeerMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    assert set(results["schedulers"]) == {
        "gang_scheduler", "kube_scheduler", "coscheduling", "coscheduling_tuned"
    }  # fmt: skip
    (one,) = results["rounds"]
    broken = []
    for workload, runs in one["workloads"].items():
        for scheduler, result in runs.items():
            if "error" in result:
                broken.append(f"{workload}, {scheduler}: {result['error']}")
            elif workload.startswith("contention"):
                # Whole or not at all, for everyone; and we must fill the room (a peer that
                # keeps holding nodes for gangs that cannot complete is a figure of the
                # bench, not a failure of ours).
                ours = scheduler == "gang_scheduler"
                if result["gangs_partly_bound"] or (
                    ours and result["gangs_whole"] != result["room_gangs"]
                ):
                    broken.append(f"{workload}, {scheduler}: {result}")
            elif result["gangs_whole"] != result["gangs"]:
                broken.append(f"{workload}, {scheduler}: {result}")
    assert not broken, "gangs not whole:\n" + "\n".join(broken)
    print(f"bench smoke: {time.monotonic() - started:.0f}s")
