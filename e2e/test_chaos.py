"""The short version of ``make chaos`` (bench/chaos.py): five seeded runs with small
workloads, random faults (scheduler and leader kills and freezes, API server and etcd
restarts, a rival binding our pods, nodes and pods deleted) and the invariant checker, on a
control plane of this module's own (``.cluster-chaos-test/``).

The seeds are pinned in `make test` (CHAOS_SEED=S picks others; `make chaos` explores); a
violation fails the
test with the seed that reproduces it: ``python -m bench.chaos --small --runs 1 --seed S``.
"""

from __future__ import annotations

import json
import os

import pytest

from bench import chaos
from testbed import cluster as local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane, pytest.mark.timeout(420)]

RUNS = 5
DIRECTORY = local_cluster.REPO / ".cluster-chaos-test"


# Seeds 100-104 passed when the suite landed; a new seed that fails goes to an issue, not CI.
PINNED_SEED = 100


def test_five_short_chaos_runs_break_no_invariant() -> None:
    seed = int(os.environ.get("CHAOS_SEED") or PINNED_SEED) % 1_000_000
    print(f"chaos seeds {seed} to {seed + RUNS - 1}")
    try:
        results = chaos.run_many(DIRECTORY, range(seed, seed + RUNS), small=True)
    except local_cluster.ClusterError as error:
        pytest.fail(f"the chaos control plane did not start: {error}", pytrace=False)
    for result in results:
        print(chaos.summary_line(result))
    bad = [r for r in results if r.violations or r.errors]
    assert not bad, "\n\n".join(
        f"seed {r.seed}: reproduce with `python -m bench.chaos --small --runs 1 --seed {r.seed}`"
        f" (logs kept in {r.logs})\n"
        + json.dumps({"violations": r.violations, "errors": r.errors}, indent=1)[:4000]
        for r in bad
    )
