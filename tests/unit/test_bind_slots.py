"""The binder's slots (shell/binding.Slots): a gang whose first member is bound has the rest
of its binds go before other gangs' first binds, so that no gang stays partly bound while a
backlog's first binds go by (make bench saw 7 s)."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.shell.binding import Slots


async def _bind(slots: Slots, name: str, order: list[str], *, urgent: bool) -> None:
    async with slots.held(urgent=urgent):
        order.append(name)
        await asyncio.sleep(0)


def test_the_rest_of_a_started_gang_binds_before_other_gangs_first_binds() -> None:
    async def scenario() -> list[str]:
        slots = Slots(1)
        order: list[str] = []
        async with slots.held(urgent=False):  # a bind in flight: everything below waits
            tasks = [
                asyncio.create_task(_bind(slots, f"g{g}-0", order, urgent=False)) for g in range(3)
            ]
            await asyncio.sleep(0)
            tasks += [
                asyncio.create_task(_bind(slots, f"g9-{m}", order, urgent=True)) for m in (1, 2)
            ]
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["g9-1", "g9-2", "g0-0", "g1-0", "g2-0"]


def test_no_more_than_the_size_are_held_at_once() -> None:
    async def scenario() -> int:
        slots = Slots(3)
        held = most = 0

        async def one(urgent: bool) -> None:
            nonlocal held, most
            async with slots.held(urgent=urgent):
                held += 1
                most = max(most, held)
                await asyncio.sleep(0.001)
                held -= 1

        await asyncio.gather(*(one(i % 2 == 0) for i in range(20)))
        return most

    assert asyncio.run(scenario()) == 3


def test_a_waiter_cancelled_gives_its_turn_and_its_slot_on() -> None:
    async def scenario() -> list[str]:
        slots = Slots(1)
        order: list[str] = []
        async with slots.held(urgent=False):
            gone = asyncio.create_task(_bind(slots, "gone", order, urgent=True))
            after = asyncio.create_task(_bind(slots, "after", order, urgent=False))
            await asyncio.sleep(0)
        gone.cancel()  # handed the slot on release, cancelled before it ran
        with pytest.raises(asyncio.CancelledError):
            await gone
        await after
        async with slots.held(urgent=False):  # nothing leaked: the slot is free again
            order.append("last")
        return order

    assert asyncio.run(scenario()) == ["after", "last"]


def test_a_waiter_cancelled_after_a_release_passed_it_over_just_goes() -> None:
    """The release runs between the cancel and the waiter's own wake-up: it skips the
    cancelled waiter (and takes it off the queue); the waiter then leaves without a slot and
    without an error of its own."""

    async def scenario() -> list[str]:
        slots = Slots(1)
        order: list[str] = []
        holder = slots.held(urgent=False)
        await holder.__aenter__()
        gone = asyncio.create_task(_bind(slots, "gone", order, urgent=False))
        after = asyncio.create_task(_bind(slots, "after", order, urgent=False))
        await asyncio.sleep(0)
        gone.cancel()
        await holder.__aexit__(None, None, None)  # before the cancelled task runs
        with pytest.raises(asyncio.CancelledError):
            await gone
        await after
        return order

    assert asyncio.run(scenario()) == ["after"]
