"""Persistent BrokerId: the RocketMQ 5.1.1 steps and recovery from a crash between any two."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.identity import (
    FINAL_NAME,
    TEMP_NAME,
    BrokerIdConflictError,
    BrokerIdentity,
    _write,
    establish_identity,
    load_identity,
    reestablish_identity,
)


class FakeController:
    """ApplyBrokerId as a CAS: an id belongs to the first register code that applied it."""

    def __init__(self) -> None:
        self.owners: dict[int, str] = {}
        self.next_id = 1
        self.calls: list[str] = []

    async def get_next(self) -> int:
        self.calls.append("next")
        return self.next_id

    async def apply(self, broker_id: int, code: str) -> None:
        self.calls.append(f"apply {broker_id}")
        owner = self.owners.get(broker_id)
        if owner is not None and owner != code:
            raise BrokerIdConflictError(f"id {broker_id} belongs to another broker")
        self.owners[broker_id] = code
        if broker_id >= self.next_id:
            self.next_id = broker_id + 1


async def test_fresh_broker_gets_the_next_id_and_keeps_it(tmp_path: Path) -> None:
    ctl = FakeController()
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    assert ident.broker_id == 1 and load_identity(tmp_path) == ident
    assert not (tmp_path / TEMP_NAME).exists()
    again = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    assert again == ident and ctl.calls == ["next", "apply 1"]  # a restart only registers


async def test_crash_after_temp_file_reapplies_the_same_id_and_code(tmp_path: Path) -> None:
    ctl = FakeController()
    _write(tmp_path / TEMP_NAME, BrokerIdentity(1, "c0ffee"))
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    assert ident == BrokerIdentity(1, "c0ffee") and ctl.calls == ["apply 1"]


async def test_crash_after_apply_before_final_file_reapplies_by_code(tmp_path: Path) -> None:
    ctl = FakeController()
    ctl.owners[1] = "c0ffee"  # applied on the controller, the final file never written
    _write(tmp_path / TEMP_NAME, BrokerIdentity(1, "c0ffee"))
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    assert ident.broker_id == 1 and (tmp_path / FINAL_NAME).exists()


async def test_temp_id_taken_by_another_broker_starts_over(tmp_path: Path) -> None:
    ctl = FakeController()
    ctl.owners[1] = "someone-else"
    ctl.next_id = 2
    _write(tmp_path / TEMP_NAME, BrokerIdentity(1, "mine"))
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    assert ident.broker_id == 2 and ctl.owners[2] == ident.register_code


async def test_final_file_wins_over_a_leftover_temp(tmp_path: Path) -> None:
    ctl = FakeController()
    _write(tmp_path / FINAL_NAME, BrokerIdentity(3, "final"))
    _write(tmp_path / TEMP_NAME, BrokerIdentity(4, "temp"))
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    assert ident == BrokerIdentity(3, "final") and ctl.calls == []
    assert not (tmp_path / TEMP_NAME).exists()


async def test_unreachable_controller_propagates(tmp_path: Path) -> None:
    async def down() -> int:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await establish_identity(tmp_path, down, FakeController().apply)
    assert load_identity(tmp_path) is None


async def test_a_forgotten_identity_is_applied_again_when_the_id_is_still_free(
    tmp_path: Path,
) -> None:
    ctl = FakeController()
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    ctl.owners.clear()  # an operator cleaned the whole group: id 1 is free again
    again = await reestablish_identity(tmp_path, ident, ctl.get_next, ctl.apply)
    assert again == ident and load_identity(tmp_path) == ident
    assert ctl.calls[-1] == "apply 1"


async def test_a_forgotten_identity_whose_id_went_to_another_broker_gets_a_new_one(
    tmp_path: Path,
) -> None:
    ctl = FakeController()
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    ctl.owners[1] = "someone-else"  # cleaned, then id 1 was given to another broker
    again = await reestablish_identity(tmp_path, ident, ctl.get_next, ctl.apply)
    assert again.broker_id == 2 and again.register_code != ident.register_code
    assert load_identity(tmp_path) == again and not (tmp_path / TEMP_NAME).exists()
    assert ctl.calls[-3:] == ["apply 1", "next", "apply 2"]


async def test_a_damaged_identity_file_is_read_from_its_bak(tmp_path: Path) -> None:
    """The identity is written once; its .bak is made with it, so one damaged file does not
    stop the broker (a new operator's trial: 'brokerIdentity and brokerIdentity.bak are both
    missing or corrupt' after one byte flipped in brokerIdentity)."""
    ctl = FakeController()
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    final = tmp_path / FINAL_NAME
    raw = bytearray(final.read_bytes())
    raw[-2] ^= 0xFF
    final.write_bytes(raw)
    assert load_identity(tmp_path) == ident


async def test_an_identity_written_without_bak_gets_one_at_the_next_start(tmp_path: Path) -> None:
    ctl = FakeController()
    ident = await establish_identity(tmp_path, ctl.get_next, ctl.apply)
    (tmp_path / (FINAL_NAME + ".bak")).unlink()  # as an older version left it
    assert await establish_identity(tmp_path, ctl.get_next, ctl.apply) == ident
    assert (tmp_path / (FINAL_NAME + ".bak")).exists()
