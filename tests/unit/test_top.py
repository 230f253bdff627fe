"""``kubectl gang top`` (#26): the gangs with members waiting, their queue, how long and why,
as a pass on the cluster as it is now says; the longest waiting first."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.explaining import top_lines, waiting_gangs
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.times import age
from tests.unit.builders import T0, gang_pods, node, snapshot


def test_top_lists_waiting_gangs_oldest_first_with_their_queue_and_why() -> None:
    pods = [
        # Too big for the cluster: says why.
        *gang_pods("huge", 2, gang="huge", min_available=2, gpu=8, created=T0 - 600,
                   labels={names.QUEUE: "team-a"}),
        # Fits: a pass would bind it.
        *gang_pods("small", 2, gang="small", min_available=2, gpu=1, created=T0 - 30),
        # Bound already: not listed.
        *[replace(p, node_name="n0", phase="Running")
          for p in gang_pods("done", 2, gang="done", min_available=2, gpu=1, created=T0 - 900)],
    ]  # fmt: skip
    snap = snapshot([node("n0", gpu=4), node("n1", gpu=4)], pods)
    rows = waiting_gangs(snap, now=T0, config=Config())
    assert [(w.key.name, w.queue, w.pending, w.minimum) for w in rows] == [
        ("huge", "team-a", 2, 2),
        ("small", "default", 2, 2),
    ]
    assert "Insufficient nvidia.com/gpu" in rows[0].why
    assert rows[1].why == "fits now: a pass binds it"
    lines = top_lines(rows, now=T0)
    assert lines[0].split() == ["NAMESPACE", "GANG", "QUEUE", "WAITING", "AGE", "REASON"]
    assert lines[1].split()[:5] == ["default", "huge", "team-a", "2/2", "10m"]
    assert lines[2].split()[:5] == ["default", "small", "default", "2/2", "30s"]
    # The columns line up: every reason starts where the header's does.
    assert {
        line.index(word) for line, word in zip(lines, ("REASON", "gang", "fits"), strict=True)
    } == {lines[0].index("REASON")}


def test_top_says_so_when_nothing_waits() -> None:
    assert top_lines(
        waiting_gangs(snapshot([node("n0")], []), now=T0, config=Config()), now=T0
    ) == ["no gang is waiting"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"), (0, "0s"), (119, "119s"), (120, "2m"), (192, "3m12s"),
        (600, "10m"), (10799, "179m"), (10800, "3h"), (18120, "5h2m"), (28800, "8h"),
        (172799, "47h"), (172800, "2d"), (273600, "3d4h"), (691200, "8d"),
        (2 * 365 * 86400, "2y"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y"),
    ],
)  # fmt: skip
def test_ages_read_as_kubectl_prints_them(seconds: int, shown: str) -> None:
    """apimachinery's duration.HumanDuration, as `kubectl get` prints AGE."""
    assert age(seconds) == shown
