"""The Statement is the one record of a turn: the ledger, the queues' room, the node
finder's cursors, decisions and the gangs' outcomes follow what it does and undoes."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.actions.allocate import Allocate
from scheduler.core.framework import run_actions
from scheduler.core.placing import Ledger
from scheduler.core.queues import QueueBook, QueueRoom
from scheduler.core.session import Session
from scheduler.core.statement import Kind, Operation, Statement
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_queue_sharing import GPU, gpu_nodes, in_queue, with_queues
from tests.unit.test_queues import queue


def test_statement_discard_undoes_every_operation_and_commit_keeps_them() -> None:
    n0 = node("n0", cpu="4")
    ledger = Ledger.of({"n0": n0}, [])
    a, b = pod("a", cpu="1"), pod("b", cpu="2")
    statement = Statement(ledger)
    statement.allocate(a, "n0")
    statement.hold(b, "n0")
    assert ledger.free("n0")["cpu"] == 1000
    statement.discard()
    assert ledger.free("n0")["cpu"] == 4000
    statement.allocate(a, "n0")
    assert [op.kind for op in statement.commit()] == [Kind.ALLOCATE]
    statement.discard()  # nothing left to undo
    assert ledger.free("n0")["cpu"] == 3000


def test_statement_evict_frees_room_and_discard_takes_it_back() -> None:
    ledger = Ledger.of({"n0": node("n0", cpu="4")}, [])
    victim = pod("v", cpu="3", node_name="n0", phase="Running")
    ledger.take("n0", victim.requests)
    statement = Statement(ledger)
    statement.evict(victim, "n0")
    assert ledger.free("n0")["cpu"] == 4000
    statement.discard()
    assert ledger.free("n0")["cpu"] == 1000


@dataclass
class Heard:
    said: list[str] = field(default_factory=list)

    def done(self, op: Operation) -> None:
        self.said.append(f"done {op.kind.value} {op.pod.ref.name if op.pod else ''}".strip())

    def undone(self, op: Operation) -> None:
        self.said.append(f"undone {op.kind.value} {op.pod.ref.name if op.pod else ''}".strip())

    def marked(self, mark: int) -> None:
        self.said.append(f"mark {mark}")

    def undone_to(self, mark: int) -> None:
        self.said.append(f"back to {mark}")

    def committed(self, ops: tuple[Operation, ...]) -> None:
        self.said.append(f"kept {len(ops)}")


def test_a_listener_hears_each_operation_each_undo_last_first_and_each_commit() -> None:
    ledger = Ledger.of({"n0": node("n0", cpu="4")}, [])
    statement = Statement(ledger)
    heard = Heard()
    statement.subscribe(heard)
    statement.allocate(pod("a"), "n0")
    mark = statement.mark()
    statement.hold(pod("b"), "n0")
    statement.decide([], 0, ("a decision",))
    statement.undo_to(mark)
    statement.allocate(pod("c"), "n0")
    statement.commit()
    assert heard.said == [
        "mark 0",  # where it starts listening
        "done allocate a",
        "mark 1",
        "done hold b",
        "done decide",
        "undone decide",
        "undone hold b",
        "back to 1",
        "done allocate c",
        "kept 2",
        "mark 0",  # a new record begins
    ]
    assert ledger.free("n0")["cpu"] == 2000


def test_undoing_a_decision_or_a_change_calls_its_undo_and_the_ledger_is_as_before() -> None:
    @dataclass
    class Held:
        attempts: int = 0

    ledger = Ledger.of({"n0": node("n0", cpu="4")}, [])
    decisions: list[str] = []
    held, other = Held(), {"flag": False}
    statement = Statement(ledger)
    statement.allocate(pod("a", cpu="3"), "n0")
    decisions.append("bind a")
    statement.decide(decisions, 0, ("bind a",))
    held.attempts = 1
    statement.field(held, "attempts", 0)
    other["flag"] = True
    statement.changed(undo=lambda: other.update(flag=False))
    statement.discard()
    assert (decisions, held.attempts, other) == ([], 0, {"flag": False})
    assert ledger.free("n0")["cpu"] == 4000


def test_the_turns_queue_room_counts_what_the_statement_allocates_and_gives_back_its_undos() -> (
    None
):
    book = QueueBook({"team-a": queue("team-a", capability={"cpu": "4"})}, usage={}, total={})
    room = QueueRoom(book, free=dict)
    ledger = Ledger.of({"n0": node("n0", cpu="8")}, [])
    statement = Statement(ledger)
    statement.subscribe(room)
    three = pod("three", cpu="3")
    statement.allocate(three, "n0", queue="team-a")
    assert "at its capability" not in room.refuse("team-a", {"cpu": 1000})
    assert "would go over its capability" in room.refuse("team-a", {"cpu": 2000})
    statement.discard()
    assert room.refuse("team-a", {"cpu": 4000}) == ""
    statement.allocate(three, "n0")  # counted in no queue
    assert room.refuse("team-a", {"cpu": 4000}) == ""


@dataclass
class NominatingThenRaising:
    """Counts a gang's members as nominated in its queue, then raises: a bug after part of
    a preemption's bookkeeping was done."""

    name: str = "nominating"

    def run(self, session: Session) -> None:
        for unit in session.order.units():
            gangs = [session.gangs[key] for key in unit if key in session.gangs]
            if unit[0].name != "a":
                continue
            with session.turn(unit, gangs) as statement:
                gang = gangs[0]
                session.queues.count_nominated(gang, [p.ref for p in gang.members])
                statement.hold(gang.members[0], "n0")
                raise RuntimeError("after the count")


def test_a_turn_that_raises_takes_back_what_it_counted_in_the_queues() -> None:
    a = gang_pods("a", 2, gang="a", min_available=2, gpu=1, labels=in_queue("team-a"))
    b = gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("team-a"))
    shot = with_queues(snapshot(gpu_nodes(4), a + b), queue("team-a", capability={GPU: "2"}))
    session = Session(shot, now=T0, config=Config())
    run_actions(session, [NominatingThenRaising(), Allocate()])
    result = session.result()
    assert [e.action for e in result.errors] == ["nominating"]
    # a backs off; b fits under the capability the undone count no longer takes.
    assert sorted(bind_map(result)) == ["b-0", "b-1"]
    assert result.memory[GangKey("default", "a")].retry_at > T0
    assert not any(n.pod.name.startswith("a-") for n in result.nominations)
