import trio
import trio.testing

from broker.server.memory import RequestMemoryPool, ResponseMemoryPool


async def test_reservations_wait_for_budget_and_resume_on_release() -> None:
    pool = RequestMemoryPool(100, 40)
    a, b = object(), object()
    await pool.reserve(a, 60)  # a is the head: it may use the whole budget
    got_second = trio.Event()

    async def second() -> None:
        await pool.reserve(b, 60)
        got_second.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert not got_second.is_set()
        assert pool.statistics()["waiting"] == 1
        pool.frame_complete(a)
        pool.release(a, 60)
        await got_second.wait()
    assert pool.reserved == 60


async def test_unbounded_pool_never_waits() -> None:
    pool = RequestMemoryPool(-1)
    await pool.reserve(object(), 10**12)
    assert pool.reserved == 10**12


async def test_the_head_can_always_finish_its_frame() -> None:
    # Others share capacity - max_request; the head's frame always fits, so the pool cannot
    # deadlock with every connection holding half a frame.
    pool = RequestMemoryPool(200, 100)
    head, others = object(), [object() for _ in range(4)]
    await pool.reserve(head, 1)
    for other in others[:2]:
        await pool.reserve(other, 50)
    blocked = trio.Event()

    async def third() -> None:
        await pool.reserve(others[2], 1)
        blocked.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        assert not blocked.is_set()  # the shared part (100) is full
        with trio.fail_after(1):
            await pool.reserve(head, 99)  # the head still gets the rest of its frame
        assert pool.reserved == 200
        pool.forget(others[0])
        await blocked.wait()


async def test_a_trickling_head_holds_only_what_it_sent() -> None:
    # Connections take budget for bytes that arrived, not for the size a frame announces:
    # two peers that announced 100 MB and sent a few bytes leave everyone else room.
    pool = RequestMemoryPool(200_000_000, 100_000_000)
    slow = [object(), object()]
    for peer in slow:
        await pool.reserve(peer, 5)
    producer = object()
    with trio.fail_after(1):
        for _ in range(8):
            await pool.reserve(producer, 256 * 1024)
    assert pool.held(producer) == 8 * 256 * 1024


async def test_fair_share_while_others_wait() -> None:
    pool = RequestMemoryPool(120, 20)  # 100 shared
    head, big, small = object(), object(), object()
    await pool.reserve(head, 1)
    await pool.reserve(big, 90)
    order: list[str] = []

    async def want(owner: object, size: int, name: str) -> None:
        await pool.reserve(owner, size)
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(want, small, 30, "small")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(want, big, 10, "big")  # would fit, but big is over its share while small waits
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        pool.release(big, 60)
        await trio.testing.wait_all_tasks_blocked()
        assert order[0] == "small"
        pool.forget(small)
        pool.forget(big)
    assert order == ["small", "big"]


async def test_forget_gives_everything_back_and_wakes_waiters() -> None:
    pool = RequestMemoryPool(100, 100)
    a, b = object(), object()
    await pool.reserve(a, 100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.reserve, b, 100)
        await trio.testing.wait_all_tasks_blocked()
        pool.forget(a)
    assert pool.held(b) == 100 and pool.reserved == 100


async def test_response_pool_serves_in_order_and_caps_large_asks() -> None:
    pool = ResponseMemoryPool(100)
    assert await pool.reserve(1000) == 100  # cut to the capacity, so it can be served at all
    pool.release(50)
    got: list[int] = []

    async def take(size: int) -> None:
        got.append(await pool.reserve(size))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, 80)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, 10)  # would fit now, but waits its turn behind the 80
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and pool.reserved == 50
        pool.release(50)
    assert sorted(got) == [10, 80] and pool.reserved == 90


async def test_response_pool_waiter_cancelled_gives_its_place_up() -> None:
    pool = ResponseMemoryPool(100)
    await pool.reserve(100)
    with trio.move_on_after(0.01):
        await pool.reserve(50)
    pool.release(100)
    assert pool.reserved == 0 and pool.statistics()["waiting"] == 0
