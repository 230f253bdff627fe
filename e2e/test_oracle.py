"""kube-scheduler as the oracle (issue #11): for random cases of every constraint the core
implements, "may this pod go on that node?" gets the same answer from kube-scheduler and
from this scheduler's core; for pods with ResourceClaims (#24), also how many devices each
claim gets; for pods with volumes (#45), also which local volume each claim gets. ``make
oracle`` asks 980; this asks 232 (about a minute on a slow 2-core machine: the cases go
over HTTP, not through a kubectl process per request)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from e2e import oracle

pytestmark = pytest.mark.cluster

CASES = int(os.environ.get("ORACLE_CASES", "120"))
GANGS = int(os.environ.get("ORACLE_GANG_CASES", "24"))
DRA = int(os.environ.get("ORACLE_DRA_CASES", "72"))
VOLUMES = int(os.environ.get("ORACLE_VOLUME_CASES", "16"))
SEED = int(os.environ.get("ORACLE_SEED", "11"))


@pytest.fixture(scope="module")
def plane() -> Iterator[oracle.Plane]:
    try:
        with oracle.oracle_plane() as plane:
            yield plane
    except oracle.local_cluster.ClusterError as error:
        pytest.fail(f"the oracle's control plane did not start: {error}", pytrace=False)


def test_kube_scheduler_and_the_core_agree_on_where_a_pod_may_go(plane: oracle.Plane) -> None:
    tally: oracle.Counter = oracle.Counter()
    found = oracle.run(
        plane, cases=CASES, seed=SEED, gangs=GANGS, dra=DRA, volumes=VOLUMES, tally=tally
    )
    assert not found, "\n\n".join(oracle.describe(case, answer) for case, answer in found)
    # Both answers occur, for pods, gangs and devices: a run of only "no" would prove little.
    kinds = ("pod yes", "pod no", "gang yes", "gang no", "dra yes", "dra no", "dra gang yes",
             "volumes yes", "volumes no")  # fmt: skip
    assert all(tally[k] for k in kinds), tally
