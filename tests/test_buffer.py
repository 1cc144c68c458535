import asyncio

import pytest

from rl.loop.admission import AdmissionControl
from rl.loop.buffer import TrajectoryBuffer
from rl.types import Group, PromptRow, Sample


def group(version: int, name: str = "p") -> Group:
    sample = Sample(index=0, tokens=[1, 2], logprobs=[-0.1, -0.2], versions=[version, version], finish_reason="stop")
    return Group(prompt=PromptRow(name, "1+1=", "2"), prompt_tokens=[5], samples=[sample], advantages=[0.0])


def accounting_holds(stats: dict[str, int]) -> bool:
    dropped = sum(v for k, v in stats.items() if k.startswith("dropped_"))
    return stats["produced"] == stats["consumed"] + stats["in_buffer"] + dropped


def test_put_get_counts_add_up():
    async def main():
        buf = TrajectoryBuffer(capacity=4)
        for i in range(3):
            await buf.put(group(0, f"p{i}"))
        batch = await buf.get_batch(2)
        stats = await buf.stats()
        return [g.prompt.prompt_id for g in batch], stats

    ids, stats = asyncio.run(main())
    assert ids == ["p0", "p1"]  # oldest first
    assert stats == {"produced": 3, "consumed": 2, "in_buffer": 1}
    assert accounting_holds(stats)


def test_put_blocks_when_full_instead_of_dropping():
    async def main():
        buf = TrajectoryBuffer(capacity=1)
        await buf.put(group(0, "a"))
        blocked = asyncio.create_task(buf.put(group(0, "b")))
        await asyncio.sleep(0.05)
        was_blocked = not blocked.done()
        first = await buf.get_batch(1)
        await asyncio.wait_for(blocked, 1.0)
        second = await buf.get_batch(1)
        return was_blocked, first[0].prompt.prompt_id, second[0].prompt.prompt_id, await buf.stats()

    was_blocked, first, second, stats = asyncio.run(main())
    assert was_blocked
    assert (first, second) == ("a", "b")
    assert stats["produced"] == 2 and stats["consumed"] == 2 and accounting_holds(stats)


def test_stale_groups_are_dropped_with_reason_and_counted():
    async def main():
        buf = TrajectoryBuffer(capacity=8, max_staleness=1)
        await buf.put(group(0, "old"))
        await buf.put(group(2, "fresh1"))
        await buf.put(group(3, "fresh2"))
        batch = await buf.get_batch(2, trainer_version=3)
        return [g.prompt.prompt_id for g in batch], await buf.stats()

    ids, stats = asyncio.run(main())
    assert ids == ["fresh1", "fresh2"]
    assert stats["dropped_stale"] == 1
    assert accounting_holds(stats)


def test_closed_buffer_wakes_a_waiting_consumer():
    async def main():
        buf = TrajectoryBuffer(capacity=2)
        waiter = asyncio.create_task(buf.get_batch(1))
        await asyncio.sleep(0.02)
        await buf.close()
        with pytest.raises(RuntimeError, match="closed"):
            await waiter

    asyncio.run(main())


def test_admission_rule_bounds_in_flight_plus_accepted():
    async def main():
        adm = AdmissionControl(batch_groups=2, max_staleness=1)
        for _ in range(4):  # (1 + 0 + 1) * 2 = 4 slots at version 0
            await adm.acquire()
        fifth = asyncio.create_task(adm.acquire())
        await asyncio.sleep(0.02)
        blocked_at_capacity = not fifth.done()
        await adm.finish(accepted=True)  # accepted still counts against the bound
        await asyncio.sleep(0.02)
        still_blocked = not fifth.done()
        await adm.set_trainer_version(1)  # the trainer moved on: 2 more slots
        await asyncio.wait_for(fifth, 1.0)
        return blocked_at_capacity, still_blocked, adm

    blocked, still_blocked, adm = asyncio.run(main())
    assert blocked and still_blocked
    assert adm.in_flight == 4 and adm.accepted == 1 and adm.capacity() == 6


def test_admission_synchronous_mode_and_rejected_groups_free_slots():
    async def main():
        adm = AdmissionControl(batch_groups=2, max_staleness=0)
        await adm.acquire()
        await adm.acquire()
        assert not adm.can_start()
        await adm.finish(accepted=False)  # e.g. all rewards dropped: the slot comes back
        assert adm.can_start()
        await adm.forget(0)
        return adm

    adm = asyncio.run(main())
    assert adm.rejected == 1 and adm.in_flight == 1


def test_admission_forget_returns_slots_of_dropped_groups():
    async def main():
        adm = AdmissionControl(batch_groups=1, max_staleness=0)
        await adm.acquire()
        await adm.finish(accepted=True)
        assert not adm.can_start()
        await adm.forget(1)
        return adm.can_start(), adm.forgotten

    assert asyncio.run(main()) == (True, 1)
