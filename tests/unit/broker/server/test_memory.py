import trio
import trio.testing

from broker.server.memory import RequestMemoryPool


async def test_reservations_wait_for_budget_and_resume_on_release() -> None:
    pool = RequestMemoryPool(100)
    await pool.reserve(60)
    got_second = trio.Event()

    async def second() -> None:
        await pool.reserve(60)
        got_second.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert not got_second.is_set()
        assert pool.statistics()["waiting"] == 1
        pool.release(60)
        await got_second.wait()
    assert pool.reserved == 60


async def test_unbounded_pool_never_waits() -> None:
    pool = RequestMemoryPool(-1)
    await pool.reserve(10**12)
    assert pool.reserved == 10**12
