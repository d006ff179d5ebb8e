"""The broker's heartbeats keep their own phase (issue 34): a stall of the active controller,
which answers every broker that was waiting at the same moment, must not put the brokers in
step for good. Each loop runs at a fixed rate from its own start (``daemon.tasks.next_due``);
before, each slept the interval after its answer, so after a stall the controller met all the
brokers that had waited on it in one burst every interval from then on."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from broker.config import BrokerConfig
from broker.replicas.heartbeat import Heartbeats
from daemon.tasks import next_due, turn_after
from remoting.errors import RemotingError
from tests.support.wait import wait_until_async

INTERVAL_S = 0.2
STALL_S = 0.5
"""Longer than two intervals: each broker waits on the stalled controller at least once."""


@given(
    due=st.floats(0, 1e6, allow_nan=False),
    period=st.floats(0.01, 100, allow_nan=False),
    late=st.floats(0, 1e4, allow_nan=False),
)
def test_next_due_is_the_first_turn_after_now_on_the_same_phase(
    due: float, period: float, late: float
) -> None:
    now = due + late
    got = next_due(due, period, now)
    assert got > now or (late == 0 and got == due + period) or math.isclose(got, now)
    assert got - now <= period * (1 + 1e-9)
    turns = (got - due) / period
    assert math.isclose(turns, round(turns), abs_tol=1e-6), (due, period, now, got)


def test_next_due_before_its_time_is_itself() -> None:
    assert next_due(10.0, 0.5, 9.0) == 10.0
    assert next_due(10.0, 0.5, 10.0) == 10.5
    assert next_due(10.0, 0.5, 11.26) == 11.5


def test_the_turn_after_a_turn_taken_early_or_late() -> None:
    assert turn_after(10.0, 0.5, 9.9) == 10.5  # woken early: still the next turn
    assert turn_after(10.0, 0.5, 10.0) == 10.5
    assert turn_after(10.0, 0.5, 11.26) == 11.5  # late: the turns missed are skipped


class StallingController:
    """The heartbeat link's fake: records when each broker sent, and answers nothing (a
    RemotingError, as a lost connection) until the stall's end for what arrives during it."""

    def __init__(self) -> None:
        self.sent: dict[str, list[float]] = {}
        self.stall_until = 0.0

    def link(self, name: str) -> Any:
        async def call(code: int, header: Any, body: Any, timeout: float) -> Any:
            loop = asyncio.get_running_loop()
            self.sent.setdefault(name, []).append(loop.time())
            if loop.time() < self.stall_until:
                await asyncio.sleep(self.stall_until - loop.time())
            raise RemotingError("no answer (the fake controller answers none)")

        return SimpleNamespace(heartbeats=SimpleNamespace(call=call))


def heartbeats(name: str, controller: StallingController) -> Heartbeats:
    cfg = BrokerConfig(
        broker_name=name,
        controllers="127.0.0.1:1",
        broker_heartbeat_interval_ms=int(INTERVAL_S * 1000),
    )
    store = SimpleNamespace(max_offset=0, confirm_offset=0)
    ctx = SimpleNamespace(store=store, metrics=SimpleNamespace(traffic=None))
    ha = SimpleNamespace(epoch_file=SimpleNamespace(last_epoch=lambda: 1))
    traffic = SimpleNamespace(due=lambda now_ms: False, body=lambda: b"", restart_pending=False)
    lease = SimpleNamespace(check=lambda now: None)

    async def register() -> None:
        return None

    return Heartbeats(
        cfg,
        cast(Any, ctx),
        cast(Any, ha),
        cast(Any, controller.link(name)),
        cast(Any, traffic),
        cast(Any, lease),
        lambda: 1,
        register,
        lambda: None,
        lambda: None,
        lambda: None,
    )


def phase_gap(a: float, b: float) -> float:
    """How far apart two send times are in the interval's phase (0 to INTERVAL_S / 2)."""
    d = (b - a) % INTERVAL_S
    return min(d, INTERVAL_S - d)


async def test_brokers_out_of_step_stay_so_after_the_controller_stalls() -> None:
    controller = StallingController()
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(heartbeats("broker-a", controller).run())
    await asyncio.sleep(INTERVAL_S / 2)  # the second broker starts half an interval later
    second = asyncio.create_task(heartbeats("broker-b", controller).run())
    try:

        def sent(n: int) -> bool:
            return all(len(controller.sent.get(b, ())) >= n for b in ("broker-a", "broker-b"))

        await wait_until_async(lambda: sent(3), "3 heartbeats of each broker", 10, interval=0.01)
        controller.stall_until = loop.time() + STALL_S
        stall_end = controller.stall_until
        await wait_until_async(
            lambda: sent(3 + 8 + int(STALL_S / INTERVAL_S)),
            "8 heartbeats of each broker after the stall",
            20,
            interval=0.01,
        )
    finally:
        for task in (first, second):
            task.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
    after = {
        n: [t for t in times if t > stall_end + INTERVAL_S / 4][:5]
        for n, times in controller.sent.items()
    }
    gaps = sorted(
        phase_gap(a, b) for a, b in zip(after["broker-a"], after["broker-b"], strict=True)
    )
    # Out of step by half an interval before the stall; still so after it. The median of five
    # pairs: one send the loop ran late does not decide it. In step (the old schedule) reads 0.
    assert gaps[2] > INTERVAL_S / 4, (gaps, controller.sent)
