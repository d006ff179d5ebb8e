"""Recovery on open: clean and unclean stops, torn and corrupt records, ConsumeQueue rebuilds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.typing import EventDict

from protocol.message import RecordEncoder, decode_record, iter_records, message_copy
from storage.store import GetStatus, MessageStore, PutResult
from tests.storage.support import (
    SEGMENT,
    TOPIC,
    commitlog_files,
    crash_copy,
    messages,
    open_store,
    read_queue,
)

NOW = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[2]


def segment_path(data_dir: Path, offset: int) -> Path:
    return data_dir / "commitlog" / f"{offset - offset % SEGMENT:020d}"


def patch_file(path: Path, pos: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(pos)
        f.write(data)


def flip_byte(data_dir: Path, offset: int) -> None:
    path = segment_path(data_dir, offset)
    pos = offset % SEGMENT
    raw = path.read_bytes()
    patch_file(path, pos, bytes([raw[pos] ^ 0x5A]))


def open_logged(data_dir: Path, **overrides: Any) -> tuple[MessageStore, list[EventDict]]:
    """:func:`open_store`, with the log lines its recovery wrote."""
    with structlog.testing.capture_logs() as logs:
        store = open_store(data_dir, **overrides)
    return store, logs


def truncation_warnings(logs: list[EventDict]) -> list[EventDict]:
    return [e for e in logs if e["log_level"] == "warning" and "truncated at offset" in e["event"]]


def open_truncated(data_dir: Path) -> tuple[MessageStore, EventDict]:
    """:func:`open_store`, whose recovery must warn of one truncation: the store and the warning."""
    store, logs = open_logged(data_dir)
    [warning] = truncation_warnings(logs)
    return store, warning


Snapshot = dict[tuple[str, int], list[tuple[int, int, bytes]]]


def snapshot(store: MessageStore) -> Snapshot:
    return {
        (topic, qid): [
            (r.queue_offset, r.physical_offset, r.body) for r in read_queue(store, topic, qid)
        ]
        for topic in store.topics()
        for qid in store.queue_ids(topic)
    }


def fill(store: MessageStore, batches: int, *, queues: int = 3, size: int = 300) -> None:
    for i in range(batches):
        store.put(TOPIC, i % queues, messages(4, size=size, prefix=f"b{i}-"), NOW + i)


def filled_and_closed(data_dir: Path, batches: int) -> tuple[Snapshot, int]:
    """A store in ``data_dir`` given ``batches`` batches (fill) and closed cleanly: what its
    queues held (snapshot) and its CommitLog's max offset."""
    store = open_store(data_dir)
    fill(store, batches)
    before = snapshot(store)
    end = store.max_offset
    store.close()
    return before, end


def test_clean_reopen_validates_only_the_last_segment(tmp_path: Path) -> None:
    before, end = filled_and_closed(tmp_path, 100)
    assert len(commitlog_files(tmp_path)) >= 3
    again, logs = open_logged(tmp_path)
    recovered = next(e for e in logs if e["event"] == "commitlog recovered")
    assert recovered["clean"] is True
    assert recovered["replayed"] == 0
    assert recovered["scanned_from"] == end - end % SEGMENT
    assert not truncation_warnings(logs)
    assert again.max_offset == end
    assert snapshot(again) == before
    again.close()


def test_kill9_keeps_every_write_and_queues_agree(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    fill(store, 40)
    store.flush()
    fill(store, 40)  # written to the page cache, not flushed
    before = snapshot(store)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    assert (crashed / "abort").exists()
    again, logs = open_logged(crashed)
    assert any("not closed cleanly" in e["event"] for e in logs)
    assert not truncation_warnings(logs)
    assert snapshot(again) == before
    assert again.flushed_offset == again.max_offset  # recovery made it durable
    again.close()


def test_torn_last_record_is_cut_off(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    fill(store, 10)
    last = store.put(TOPIC, 0, messages(3, size=2000), NOW)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    torn_at = last.physical_offsets[2]
    # The last record reached the disk only halfway.
    path = segment_path(crashed, torn_at)
    patch_file(path, torn_at % SEGMENT + 1000, bytes(1000))
    again, warning = open_truncated(crashed)
    assert warning["event"] == f"commitlog recovery truncated at offset {torn_at}: CRC mismatch"
    assert warning["offset"] == torn_at
    assert again.max_offset == torn_at
    assert again.queue_max_offset(TOPIC, 0) == last.first_queue_offset + 2
    assert path.read_bytes()[torn_at % SEGMENT :] == bytes(SEGMENT - torn_at % SEGMENT)
    again.close()


def test_garbage_after_the_last_record_is_zeroed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    fill(store, 5)
    end = store.max_offset
    before = snapshot(store)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    patch_file(segment_path(crashed, end), end % SEGMENT, os.urandom(300))
    again, warning = open_truncated(crashed)
    assert warning["offset"] == end
    assert again.max_offset == end
    assert snapshot(again) == before
    again.close()
    # The cut was made durable: reopening (now cleanly) sees the same, with no warning.
    third, logs = open_logged(crashed)
    assert not truncation_warnings(logs)
    assert snapshot(third) == before
    third.close()


def test_corrupt_record_in_durable_data_is_quarantined_and_the_rest_kept(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = [store.put(TOPIC, 0, messages(1, size=200, prefix=f"r{i}-"), NOW) for i in range(20)]
    end = store.max_offset
    store.close()
    bad = results[7].physical_offsets[0]
    size = results[8].physical_offsets[0] - bad
    flip_byte(tmp_path, bad + 100)  # inside the body: the CRC no longer matches
    damaged = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()[bad : bad + size]
    again, logs = open_logged(tmp_path)
    assert not truncation_warnings(logs)
    [error] = [e for e in logs if e["log_level"] == "error"]
    assert error["offset"] == bad and error["size"] == size and error["reason"] == "CRC mismatch"
    # Nothing after the damage is lost; the damaged record is copied aside, kept in place.
    assert again.max_offset == end
    assert again.queue_max_offset(TOPIC, 0) == 20
    assert [r.queue_offset for r in read_queue(again, TOPIC, 0)] == list(range(7))
    failed = again.get(TOPIC, 0, 7, 10, 1 << 20)
    assert (failed.status, failed.corrupt_offset, failed.next_offset) == (GetStatus.CORRUPT, bad, 7)
    assert [r.queue_offset for r in read_queue(again, TOPIC, 0, start=8)] == list(range(8, 20))
    copy = tmp_path / "quarantine" / f"commitlog-{bad:020d}-{size}"
    assert copy.read_bytes() == damaged
    assert again.corruption["recovery_quarantined"] == 1
    # New writes continue after the last record.
    result = again.put(TOPIC, 0, messages(1, prefix="new"), NOW)
    assert (result.first_queue_offset, result.physical_offsets) == (20, [end])
    again.close()


def test_corruption_after_the_checkpoint_drops_later_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    fill(store, 30)
    store.flush()
    checkpointed = store.max_offset
    results = [store.put(TOPIC, 1, messages(8, size=900), NOW) for _ in range(30)]
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    bad = next(
        r for r in results if r.physical_offsets[0] > checkpointed + SEGMENT
    ).physical_offsets[3]
    assert len(commitlog_files(crashed)) > bad // SEGMENT + 1
    flip_byte(crashed, bad + 8)  # the CRC field itself
    again, warning = open_truncated(crashed)
    assert warning["offset"] == bad
    assert again.max_offset == bad
    assert len(commitlog_files(crashed)) == bad // SEGMENT + 1
    records = read_queue(again, TOPIC, 1)
    assert records and records[-1].physical_offset < bad
    assert [r.queue_offset for r in records] == list(range(len(records)))
    again.close()


def six_records_crashed(tmp_path: Path) -> tuple[Path, list[PutResult]]:
    """Six one-message puts to queue 0, then a crash copy of the store (its data directory)."""
    store = open_store(tmp_path / "live")
    results = [store.put(TOPIC, 0, messages(1, size=100), NOW) for _ in range(6)]
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    return crashed, results


def test_valid_record_with_a_wrong_queue_offset_is_corrupt(tmp_path: Path) -> None:
    crashed, results = six_records_crashed(tmp_path)
    target = results[4].physical_offsets[0]
    path = segment_path(crashed, target)
    record = decode_record(path.read_bytes(), target % SEGMENT)
    forged = RecordEncoder(record.store_host).encode(
        message_copy(record, record.topic, record.properties),
        queue_id=record.queue_id,
        queue_offset=record.queue_offset + 5,
        physical_offset=record.physical_offset,
        store_timestamp=record.store_timestamp,
    )
    assert len(forged) == record.size
    patch_file(path, target % SEGMENT, forged)
    again, warning = open_truncated(crashed)
    assert warning["offset"] == target
    assert "queue offset 9" in warning["reason"]
    assert again.queue_max_offset(TOPIC, 0) == 4
    again.close()


def test_valid_record_at_the_wrong_position_is_corrupt(tmp_path: Path) -> None:
    crashed, results = six_records_crashed(tmp_path)
    path = segment_path(crashed, 0)
    raw = path.read_bytes()
    first, second = results[0].physical_offsets[0], results[1].physical_offsets[0]
    patch_file(path, second, raw[first:second])  # a stale copy of record 0 (same size)
    again, warning = open_truncated(crashed)
    assert warning["offset"] == second
    assert "says it is at offset 0" in warning["reason"]
    assert again.max_offset == second
    again.close()


def test_a_bad_blank_tail_is_corrupt(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    ends = []
    while len(commitlog_files(tmp_path / "live")) < 2:
        ends.append(store.put(TOPIC, 0, messages(5, size=1000), NOW).end_offset)
    blank_at = ends[-2]
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    # Make the blank claim fewer bytes than the segment has left.
    patch_file(
        segment_path(crashed, blank_at),
        blank_at % SEGMENT,
        (SEGMENT - blank_at - 8).to_bytes(4, "big"),
    )
    again, warning = open_truncated(crashed)
    assert warning["offset"] == blank_at
    assert "does not end its segment" in warning["reason"]
    assert again.max_offset == blank_at
    assert len(commitlog_files(crashed)) == 1
    assert again.queue_max_offset(TOPIC, 0) == 5 * (len(ends) - 1)
    # Writing resumes in the first segment and rolls again normally.
    for _ in range(3):
        again.put(TOPIC, 0, messages(5, size=1000), NOW)
    assert [r.queue_offset for r in read_queue(again, TOPIC, 0)] == list(
        range(again.queue_max_offset(TOPIC, 0))
    )
    again.close()


def test_blank_tails_survive_an_unclean_stop(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    fill(store, 120, size=800)
    before = snapshot(store)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    assert len(commitlog_files(crashed)) >= 5
    again, logs = open_logged(crashed)
    assert not truncation_warnings(logs)
    assert snapshot(again) == before
    again.close()


def test_consume_queues_are_rebuilt_when_their_directory_is_gone(tmp_path: Path) -> None:
    store = open_store(tmp_path, consumequeue_segment_entries=32)
    fill(store, 90, queues=4)
    store.put("Other", 0, [messages(1)[0]], NOW)
    before = snapshot(store)
    maxima = {key: store.queue_max_offset(*key) for key in before}
    store.close()
    shutil.rmtree(tmp_path / "consumequeue")
    again, logs = open_logged(tmp_path, consumequeue_segment_entries=32)
    assert any("rebuilding" in e["event"] for e in logs)
    assert snapshot(again) == before
    assert {key: again.queue_max_offset(*key) for key in before} == maxima
    again.close()


def test_torn_consume_queue_entries_past_the_checkpoint_are_rebuilt(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live", consumequeue_segment_entries=1000)
    fill(store, 10, queues=1)
    store.flush()
    fill(store, 10, queues=1)
    before = snapshot(store)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    cq = crashed / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    # Entry 50 (after the checkpoint at 40) lost, entry 95 (never written) full of garbage.
    patch_file(cq, 50 * 20, bytes(20))
    patch_file(cq, 95 * 20, os.urandom(20))
    again = open_store(crashed, consumequeue_segment_entries=1000)
    assert snapshot(again) == before
    assert again.queue_max_offset(TOPIC, 0) == 80
    assert cq.read_bytes()[80 * 20 :] == bytes(920 * 20)
    again.close()


def test_zero_gap_followed_by_data_is_cut_and_reported(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    results = [store.put(TOPIC, 0, messages(1, size=300), NOW) for _ in range(10)]
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    # A lost page in the middle: record 4's bytes never reached the disk, later ones did.
    start, end = results[4].physical_offsets[0], results[5].physical_offsets[0]
    patch_file(segment_path(crashed, start), start, bytes(end - start))
    again, warning = open_truncated(crashed)
    assert warning["offset"] == start
    assert again.queue_max_offset(TOPIC, 0) == 4
    again.close()


def test_missing_checkpoint_means_full_validation(tmp_path: Path) -> None:
    before, _ = filled_and_closed(tmp_path, 60)
    for name in ("checkpoint", "checkpoint.bak"):
        (tmp_path / name).unlink(missing_ok=True)
    again, logs = open_logged(tmp_path)
    recovered = next(e for e in logs if e["event"] == "commitlog recovered")
    assert recovered["clean"] is False and recovered["scanned_from"] == 0
    assert snapshot(again) == before
    again.close()


def test_damage_while_every_queue_is_rebuilt_leaves_an_entry_naming_it(tmp_path: Path) -> None:
    before, end = filled_and_closed(tmp_path, 60)
    # The checkpoint is lost (so every ConsumeQueue entry is replayed) and a record in the first
    # segment is damaged: the records after it keep their queue offsets.
    for name in ("checkpoint", "checkpoint.bak"):
        (tmp_path / name).unlink(missing_ok=True)
    victim = before[(TOPIC, 1)][5]
    flip_byte(tmp_path, victim[1] + 100)
    again, logs = open_logged(tmp_path)
    assert not truncation_warnings(logs)
    assert again.max_offset == end
    assert again.corruption["recovery_quarantined"] == 1
    failed = again.get(TOPIC, 1, 5, 10, 1 << 20)
    assert (failed.status, failed.corrupt_offset) == (GetStatus.CORRUPT, victim[1])

    def rows(start: int) -> list[tuple[int, int, bytes]]:
        return [
            (r.queue_offset, r.physical_offset, r.body)
            for r in read_queue(again, TOPIC, 1, start=start)
        ]

    assert rows(0) == before[(TOPIC, 1)][:5]
    assert rows(6) == before[(TOPIC, 1)][6:]
    now = snapshot(again)
    assert {k: v for k, v in now.items() if k != (TOPIC, 1)} == {
        k: v for k, v in before.items() if k != (TOPIC, 1)
    }
    assert again.queue_max_offset(TOPIC, 1) == len(before[(TOPIC, 1)])
    again.close()


def test_missing_segment_files_in_the_middle_lose_only_their_records(tmp_path: Path) -> None:
    before, end = filled_and_closed(tmp_path, 150)
    files = commitlog_files(tmp_path)
    assert len(files) >= 4
    gone = (int(files[1].name), int(files[3].name))  # the second and third segments
    for path in files[1:3]:
        path.unlink()
    again, logs = open_logged(tmp_path)
    assert any(f"from offset {gone[0]} to {gone[1]} are missing" in e["event"] for e in logs)
    assert not truncation_warnings(logs)
    assert again.min_offset == 0 and again.max_offset == end
    assert again.corruption["segment_short"] == 1
    for (topic, qid), rows in before.items():
        for queue_offset, physical, body in rows:
            got = again.get(topic, qid, queue_offset, 1, 1 << 20)
            if gone[0] <= physical < gone[1]:
                assert (got.status, got.corrupt_offset) == (GetStatus.CORRUPT, physical)
            else:
                [record] = iter_records(got.body)
                assert (record.queue_offset, record.physical_offset, record.body) == (
                    queue_offset,
                    physical,
                    body,
                )
    again.close()


def test_a_segment_file_of_a_few_garbage_bytes_is_quarantined(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir(parents=True)
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(b"garbage")
    store = open_store(tmp_path)  # used to fail: struct.error reading an 8-byte prefix
    assert store.max_offset == 0
    assert store.corruption["recovery_cut"] == 1
    assert (tmp_path / "quarantine" / f"commitlog-{0:020d}-7").read_bytes() == b"garbage"
    store.put(TOPIC, 0, messages(2), NOW)
    assert [r.queue_offset for r in read_queue(store, TOPIC, 0)] == [0, 1]
    store.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_a_zeroed_consume_queue_entry_is_not_the_end_of_its_queue(
    tmp_path: Path, clean: bool
) -> None:
    store = open_store(tmp_path / "live", consumequeue_segment_entries=1000)
    for i in range(100):
        store.put(TOPIC, 0, messages(1, prefix=f"r{i}-"), NOW)
    store.flush()
    before = snapshot(store)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    data = tmp_path / "live" if clean else crashed
    # Entry 62 is where the search for the queue's end first looks below 125: it used to end
    # the queue there, hiding messages 62..99 and giving offset 62 to the next message.
    cq = data / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    patch_file(cq, 62 * 20, bytes(20))
    with structlog.testing.capture_logs() as logs:
        again = open_store(data, consumequeue_segment_entries=1000)
        # After a clean stop the queue is loaded (and checked) when first used: here.
        after = snapshot(again)
    assert any("entry 62 is unwritten inside the queue; rebuilt" in e["event"] for e in logs)
    assert again.corruption["consumequeue_rebuilt"] == 1
    assert after == before
    assert again.put(TOPIC, 0, messages(1), NOW).first_queue_offset == 100
    again.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_a_queue_whose_segment_files_are_gone_is_rebuilt_not_restarted_at_0(
    tmp_path: Path, clean: bool
) -> None:
    # A new user's trial: one queue's ConsumeQueue file deleted from a stopped broker (its
    # directory kept). The queue came back empty: its messages were never served again, and
    # the next message sent to it was given queue offset 0 once more, silently.
    store = open_store(tmp_path / "live", consumequeue_segment_entries=1000)
    fill(store, 30, queues=3)
    store.put("Other", 0, messages(2), NOW)
    store.flush()
    fill(store, 6, queues=3)  # past the checkpoint: replayed after an unclean stop
    before = snapshot(store)
    lost_max = store.queue_max_offset(TOPIC, 1)
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    data = tmp_path / "live" if clean else crashed
    queue_dir = data / "consumequeue" / TOPIC / "1"
    for path in queue_dir.iterdir():
        path.unlink()
    with structlog.testing.capture_logs() as logs:
        again = open_store(data, consumequeue_segment_entries=1000)
        after = snapshot(again)  # after a clean stop the queue is loaded when first used: here
    assert after == before
    assert any(
        f"consume queue {TOPIC}:1: its directory holds no segment file" in e["event"] for e in logs
    )
    assert again.corruption["consumequeue_rebuilt"] == 1
    assert again.put(TOPIC, 1, messages(1), NOW).first_queue_offset == lost_max
    again.close()


def test_sigkill_of_a_real_process_loses_nothing_flushed(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from tests.storage.support import messages, open_store
        store = open_store(Path({str(tmp_path)!r}))
        for i in range(50):
            store.put("TopicTest", i % 2, messages(10, size=500, prefix=f"b{{i}}-"), 1)
            if i % 10 == 9:
                print(store.flush(), flush=True)
        store.put("TopicTest", 0, messages(3), 1)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    flushed = int(proc.stdout.split()[-1])
    again = open_store(tmp_path)
    assert again.max_offset >= flushed
    for queue_id in (0, 1):
        records = read_queue(again, TOPIC, queue_id)
        assert [r.queue_offset for r in records] == list(range(len(records)))
        assert len(records) >= 250
    assert again.queue_max_offset(TOPIC, 0) == 253  # the page cache survives a kill
    again.close()


def test_power_loss_keeps_exactly_what_was_flushed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "live")
    fill(store, 30)
    flushed = store.flush()
    durable = snapshot(store)
    fill(store, 60)  # never flushed
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    # Power loss: CommitLog pages past the flush are gone; ConsumeQueue pages happened to
    # reach the disk, so their entries now point at nothing.
    for path in commitlog_files(crashed):
        start = int(path.name)
        if start >= flushed - flushed % SEGMENT + SEGMENT:
            path.unlink()
        elif start <= flushed < start + SEGMENT:
            patch_file(path, flushed - start, bytes(SEGMENT - (flushed - start)))
    again, logs = open_logged(crashed)
    assert not truncation_warnings(logs)
    assert again.max_offset == flushed
    assert snapshot(again) == durable
    again.close()
