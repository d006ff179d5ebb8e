"""The remark a fenced master answers writes with says why: its lease ran out, or it was never
granted (no heartbeat answered since the broker started)."""

from __future__ import annotations

from broker.role import fence_remark


def test_a_lease_never_granted_says_no_heartbeat_was_answered() -> None:
    remark = fence_remark("127.0.0.1:10911", "broker-a", 0.0, 5_000.0)
    assert remark == (
        "master 127.0.0.1:10911 of broker-a is fenced: the active controller has answered none "
        "of its heartbeats since it started"
    )


def test_a_lease_that_ran_out_says_how_long_ago() -> None:
    remark = fence_remark("127.0.0.1:10911", "broker-a", 100.0, 100.25)
    assert remark.endswith("ran out 250 ms ago")
    assert remark.startswith("master 127.0.0.1:10911 of broker-a is fenced: its write lease")
