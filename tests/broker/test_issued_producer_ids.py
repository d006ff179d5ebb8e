"""IssuedProducerIds (broker/send/idempotence.py): what the broker knows of the producer ids the
controllers issued, from their heartbeat answers (issue 29, docs/idempotence.md)."""

from __future__ import annotations

import asyncio

import pytest

from broker.send import idempotence
from broker.send.idempotence import IssuedProducerIds
from tests.support.wait import stays_async


def test_the_limit_only_rises_and_is_off_without_authentication() -> None:
    ids = IssuedProducerIds(enabled=True)
    assert not ids.issued(1)  # nothing told yet
    ids.told(10)
    assert ids.issued(9) and not ids.issued(10)
    ids.told(4)  # a new controller leader that has not applied the latest ids yet
    assert ids.limit == 10 and ids.issued(9)
    assert IssuedProducerIds(enabled=False).issued(2**62)


async def test_a_send_waits_for_an_answer_that_covers_its_id() -> None:
    ids = IssuedProducerIds(enabled=True)
    ids.told(5)
    waiting = asyncio.ensure_future(ids.wait(7))
    await stays_async(lambda: not waiting.done(), 0.05, "the send waiting", interval=0.01)
    ids.told(5)  # an answer from before the producer took its id
    await stays_async(lambda: not waiting.done(), 0.05, "the send waiting", interval=0.01)
    ids.told(8)
    assert await asyncio.wait_for(waiting, 5) is True


async def test_two_answers_that_do_not_cover_an_id_refuse_it() -> None:
    ids = IssuedProducerIds(enabled=True)
    ids.told(5)
    waiting = asyncio.ensure_future(ids.wait(1000))
    await asyncio.sleep(0.05)
    ids.told(6)
    await asyncio.sleep(0.05)
    assert not waiting.done()
    ids.told(6)
    assert await asyncio.wait_for(waiting, 5) is False


async def test_no_answer_in_time_is_not_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idempotence, "_ISSUE_WAIT_S", 0.2)
    ids = IssuedProducerIds(enabled=True)
    ids.told(5)
    assert await ids.wait(9) is None
