"""SealedQueues: which static topic queues a broker refuses sends to (pure, time is an input)."""

from __future__ import annotations

from broker.sealed_queues import SealedQueues


def test_a_fence_closes_one_queue_until_its_deadline() -> None:
    s = SealedQueues()
    assert not s.has_closed("T") and not s.closed("T", 0, 0.0)
    s.fence("T", 1, until=10.0)
    assert s.has_closed("T") and not s.has_closed("U")
    assert s.closed("T", 1, 9.9) and not s.closed("T", 0, 9.9)
    assert not s.closed("T", 1, 10.0)  # the move did not commit in time: open again
    assert not s.has_closed("T")


def test_a_fence_is_released_or_extended_never_shortened() -> None:
    s = SealedQueues()
    s.fence("T", 0, until=10.0)
    s.fence("T", 0, until=5.0)
    assert s.closed("T", 0, 7.0)
    s.unfence("T", 0)
    assert not s.closed("T", 0, 7.0) and not s.has_closed("T")
    s.unfence("T", 0)  # releasing twice is harmless


def test_sealed_queues_stay_closed_forever_and_older_answers_never_reopen_them() -> None:
    s = SealedQueues()
    s.fence("T", 0, until=10.0)
    s.learn([("T", 0), ("U", 2)])
    assert s.closed("T", 0, 1e9) and s.closed("U", 2, 1e9)  # the fence's deadline is moot
    s.learn([])  # an answer from before the seal
    s.learn([("U", 2)])
    assert s.sealed() == frozenset({("T", 0), ("U", 2)})
    assert s.closed("T", 0, 1e9) and not s.closed("U", 1, 0.0)
    s.fence("T", 0, until=1.0)  # fencing a sealed queue changes nothing
    s.unfence("T", 0)
    assert s.closed("T", 0, 2.0)
