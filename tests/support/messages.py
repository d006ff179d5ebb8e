"""Messages for the tests that run against a real broker, sent with our SDK."""

from __future__ import annotations

import asyncio

from client.admin import Admin
from client.producer import Producer


async def fill(address: str, topic: str, n: int, queues: int = 2) -> list[str]:
    """Create ``topic`` with ``queues`` queues on the broker at ``address`` and send it ``n``
    messages at once (body ``m<i>``, key ``k<i>``); their message ids, in the order sent."""
    async with Admin(address) as admin:
        await admin.create_topic(topic, queues)
    async with Producer(address) as producer:
        results = await asyncio.gather(
            *(producer.send(topic, f"m{i}".encode(), keys=f"k{i}") for i in range(n))
        )
    return [r.msg_id for r in results]
