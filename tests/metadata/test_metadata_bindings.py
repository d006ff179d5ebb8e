"""BrokerBindings: which connection speaks for a broker id on the active controller."""

from __future__ import annotations

from controller.metadata import BrokerBindings
from tests.metadata.support import CountingDict

HOLD = 3000


def bound() -> BrokerBindings:
    b = BrokerBindings()
    b.bind("a", 1, 10, 0)
    return b


def test_a_free_id_binds_and_its_own_connection_rebinds() -> None:
    b = BrokerBindings()
    assert b.holder("a", 1) is None
    kw = {"code_verified": False, "alive": True, "now_ms": 0, "hold_ms": HOLD}
    assert b.may_bind("a", 1, 10, **kw)  # type: ignore[arg-type]
    b.bind("a", 1, 10, 0)
    assert b.holder("a", 1) == 10
    assert b.may_bind("a", 1, 10, **kw)  # type: ignore[arg-type]


def test_another_connection_needs_the_code_while_the_holder_is_alive_or_fresh() -> None:
    b = bound()
    assert not b.may_bind("a", 1, 11, code_verified=False, alive=True, now_ms=9999, hold_ms=HOLD)
    assert not b.may_bind("a", 1, 11, code_verified=False, alive=False, now_ms=100, hold_ms=HOLD)
    assert b.may_bind("a", 1, 11, code_verified=True, alive=True, now_ms=100, hold_ms=HOLD)
    # Dead and registered long ago: the broker came back on a new connection.
    assert b.may_bind("a", 1, 11, code_verified=False, alive=False, now_ms=9999, hold_ms=HOLD)


def test_a_closed_connection_or_a_clean_frees_the_id() -> None:
    b = bound()
    b.bind("a", 2, 10, 0)
    b.bind("b", 1, 12, 0)
    assert b.connection_closed(10) == [("a", 1), ("a", 2)]
    assert b.holder("a", 1) is None and b.holder("b", 1) == 12
    b.forget("b", frozenset({1}))
    assert b.holder("b", 1) is None


def test_a_closed_connection_frees_its_brokers_without_walking_the_others() -> None:
    """Issue 34: every closed connection (a client's too) walked all 2,000 brokers' bindings."""
    b = BrokerBindings()
    for i in range(2000):
        b.bind(f"g{i // 3}", i % 3, 100 + i, 0)
    b.bind("g0", 0, 7, 5)  # rebound on a new connection: the old one holds it no more
    b._by_key = counting = CountingDict(b._by_key)
    assert b.connection_closed(100) == []
    assert b.connection_closed(101) == [("g0", 1)]
    assert b.connection_closed(99_999) == []
    assert counting.walks == 0
    b.forget("g0")
    assert b.connection_closed(7) == []  # forgotten: its connection holds nothing
    assert b.holder("g1", 0) == 103
