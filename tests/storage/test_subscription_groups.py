"""Subscription groups and the DLQ resend ledger: persisted atomically, reloaded exactly, bad
input and bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.retry import RetryConfigError, SubscriptionGroupConfig
from storage.config_files import COVERED_STEP, DlqResendLedger, SubscriptionGroupStore
from storage.errors import StoreError
from storage.small_file import decode, write_atomic


def test_groups_persist_every_change_and_unset_keys_keep_their_value(tmp_path: Path) -> None:
    groups = SubscriptionGroupStore(tmp_path)
    groups.load()
    assert groups.get("G") == SubscriptionGroupConfig("G")  # the defaults, not stored
    assert groups.configured("G") is None
    groups.update({"groupName": "G", "retryMaxTimes": 3, "retryDelays": "1s 1s 2s"})
    groups.update({"groupName": "G", "consumeRetryEnable": False})
    again = SubscriptionGroupStore(tmp_path)
    again.load()
    assert again.all() == {"G": SubscriptionGroupConfig("G", 3, (1000, 1000, 2000), False)}
    doc = json.loads(decode((tmp_path / "config" / "subscriptionGroup.json").read_bytes()) or b"")
    assert doc["groups"]["G"] == {
        "groupName": "G",
        "retryMaxTimes": 3,
        "retryDelays": "1s 1s 2s",
        "consumeRetryEnable": False,
        "consumeMessageOrderly": False,
    }


def test_a_bad_update_stores_nothing(tmp_path: Path) -> None:
    groups = SubscriptionGroupStore(tmp_path)
    groups.load()
    groups.update({"groupName": "G", "retryMaxTimes": 3})
    before = (tmp_path / "config" / "subscriptionGroup.json").read_bytes()
    for bad in (
        {"groupName": "G", "retryMaxTimes": -1},
        {"groupName": "G", "retryDelays": "soon"},
        {"groupName": "G", "colour": "red"},
    ):
        with pytest.raises(RetryConfigError):
            groups.update(bad)
    assert groups.get("G").retry_max_times == 3
    assert (tmp_path / "config" / "subscriptionGroup.json").read_bytes() == before


def test_a_file_with_a_bad_entry_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    path.parent.mkdir(parents=True)
    doc = {"version": 1, "groups": {"G": {"groupName": "G", "retryMaxTimes": -5}}}
    write_atomic(path, json.dumps(doc).encode())
    with pytest.raises(StoreError, match="retryMaxTimes"):
        SubscriptionGroupStore(tmp_path).load()
    doc = {"version": 1, "groups": {"G": {"groupName": "H"}}}
    write_atomic(path, json.dumps(doc).encode())
    with pytest.raises(StoreError, match="bad entry for group 'G'"):
        SubscriptionGroupStore(tmp_path).load()


def test_the_resend_ledger_persists_and_merges(tmp_path: Path) -> None:
    ledger = DlqResendLedger(tmp_path)
    ledger.load()
    ledger.mark("G", [0, 2])
    ledger.mark("G", [2])
    again = DlqResendLedger(tmp_path)
    again.load()
    assert again.was_resent("G", 2) and not again.was_resent("G", 1)
    again.merge({"G": [1], "H": [7]})
    assert again.snapshot() == {"G": [0, 1, 2], "H": [7]}
    third = DlqResendLedger(tmp_path)
    third.load()
    assert third.snapshot() == {"G": [0, 1, 2], "H": [7]}


def test_the_resend_ledger_keeps_the_commitlog_offset_it_covers(tmp_path: Path) -> None:
    ledger = DlqResendLedger(tmp_path)
    ledger.load()
    assert ledger.covered == 0  # none yet: a new master reads its whole CommitLog once
    ledger.mark("G", [3], covered=1000)
    ledger.merge({}, 1000 + COVERED_STEP - 1)  # moved, but less than a step: not written
    assert ledger.covered == 1000 + COVERED_STEP - 1
    again = DlqResendLedger(tmp_path)
    again.load()
    assert again.covered == 1000 and again.was_resent("G", 3)
    again.merge({}, 500)  # a new master's shorter log: written at once
    third = DlqResendLedger(tmp_path)
    third.load()
    assert third.covered == 500
