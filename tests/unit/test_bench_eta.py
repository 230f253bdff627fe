"""The ETA bench's count of reservations pushed back (bench/eta.py): a gang that started
later than its reservation said, behind a gang that started on its nodes after the
reservation was made and still ran when it was due."""

from __future__ import annotations

from bench.eta import Reservations


def _reserved(*, due: float, started: float, runs: list) -> Reservations:
    seen = Reservations()
    seen.made["big"] = (10.0, due, frozenset({"n0", "n1"}))
    seen.started["big"] = started
    seen.runs = [("big", frozenset({"n0", "n1"}), started, started + 100.0), *runs]
    return seen


def test_a_reservation_kept_is_counted_and_nothing_else() -> None:
    seen = _reserved(due=100.0, started=100.5, runs=[("small", frozenset({"n0"}), 20.0, 90.0)])
    assert seen.figures(slack=1.0) == {
        "reservations": 1,
        "started after their reservation's start": 0,
        "of them behind a gang started since on its nodes": 0,
        "of them behind a backfilled gang": 0,
    }


def test_a_gang_started_late_behind_a_backfill_on_its_nodes_is_counted() -> None:
    seen = _reserved(due=100.0, started=130.0, runs=[("long", frozenset({"n1"}), 20.0, 130.0)])
    figures = seen.figures(slack=1.0)
    assert figures["started after their reservation's start"] == 1
    assert figures["of them behind a gang started since on its nodes"] == 1
    assert figures["of them behind a backfilled gang"] == 0, "it did not say it backfilled"
    seen.backfilled.add("long")
    assert seen.figures(slack=1.0)["of them behind a backfilled gang"] == 1


def test_a_late_start_with_no_backfill_on_its_nodes_is_late_only() -> None:
    elsewhere = ("long", frozenset({"n7"}), 20.0, 130.0)
    before = ("older", frozenset({"n0"}), 5.0, 130.0)  # running before the reservation
    figures = _reserved(due=100.0, started=130.0, runs=[elsewhere, before]).figures(slack=1.0)
    assert figures["started after their reservation's start"] == 1
    assert figures["of them behind a gang started since on its nodes"] == 0
