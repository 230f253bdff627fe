"""Writers waiting behind the binds share one poller: a hundred waiters cost the event loop
what one does, and all go once the binds are done (or the limit is up)."""

from __future__ import annotations

import asyncio

from scheduler.shell.settling import Settling


def test_a_hundred_waiters_share_one_poll_and_all_go_once_it_no_longer_holds() -> None:
    asked: list[int] = []
    busy = [True]

    def holding() -> bool:
        asked.append(1)
        return busy[0]

    async def scenario() -> bool:
        settling = Settling(holding, interval=0.01)
        waiters = [asyncio.ensure_future(settling.wait()) for _ in range(100)]
        await asyncio.sleep(0.2)
        still = not any(w.done() for w in waiters)
        busy[0] = False
        await asyncio.wait_for(asyncio.gather(*waiters), 1)
        return still

    assert asyncio.run(scenario()), "a waiter went while the binds were still in flight"
    # 100 waiters each asking first, then one poller every 10 ms for 0.2 s: about 120 in
    # all, where a poller each would have asked some 2,000 times.
    assert len(asked) < 300


def test_a_wait_ends_at_its_limit_though_it_still_holds() -> None:
    async def scenario() -> bool:
        settling = Settling(lambda: True, interval=0.01, limit=0.1)
        waiting = asyncio.ensure_future(settling.wait())
        done, _ = await asyncio.wait([waiting], timeout=2)
        return bool(done)

    assert asyncio.run(scenario())


def test_nothing_waits_while_it_does_not_hold() -> None:
    async def scenario() -> None:
        await asyncio.wait_for(Settling(lambda: False, interval=10).wait(), 0.5)

    asyncio.run(scenario())
