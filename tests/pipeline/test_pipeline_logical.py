"""Static topics in the pipeline, without a cluster: logical bounds from the items' physical
ones, logical offsets committed as the consumers' physical ones, and rows shown by logical queue
(rows past a sealed item's end or on a queue no item maps left out)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from client.routes import LOGICAL_BROKER, MessageQueue
from pipeline.errors import OptionError
from pipeline.logical import logical_bounds, logical_view, physical_commits
from pipeline.offsets import QueueBounds
from pipeline.store import StoreOptions
from protocol.static_topic import LogicalQueue, item_doc
from tests.metadata.support import mapping_item

STAYS: LogicalQueue = (mapping_item("a", 0, 0, 0, None),)
MOVED: LogicalQueue = (mapping_item("a", 1, 0, 0, 4), mapping_item("b", 0, 4, 1, None))
MAPPING = (STAYS, MOVED)


def test_logical_bounds_span_the_items() -> None:
    physical = {
        MessageQueue("a", 0): QueueBounds(2, 9),
        MessageQueue("a", 1): QueueBounds(1, 4),
        MessageQueue("b", 0): QueueBounds(0, 3),
    }
    assert logical_bounds(MAPPING, physical) == {
        MessageQueue(LOGICAL_BROKER, 0): QueueBounds(2, 9),
        MessageQueue(LOGICAL_BROKER, 1): QueueBounds(1, 7),
    }
    # Retention emptied the old item: the queue starts on the new one.
    physical[MessageQueue("a", 1)] = QueueBounds(4, 4)
    assert logical_bounds(MAPPING, physical)[MessageQueue(LOGICAL_BROKER, 1)] == QueueBounds(4, 7)
    # A group that did not answer: its logical queues are left out.
    del physical[MessageQueue("b", 0)]
    assert list(logical_bounds(MAPPING, physical)) == [MessageQueue(LOGICAL_BROKER, 0)]


def test_logical_offsets_commit_as_physical_ones() -> None:
    offsets = {MessageQueue(LOGICAL_BROKER, 0): 5, MessageQueue(LOGICAL_BROKER, 1): 6}
    assert physical_commits(MAPPING, offsets) == {
        MessageQueue("a", 0): 5,
        MessageQueue("a", 1): 4,
        MessageQueue("b", 0): 2,
    }


def test_rows_show_logical_queues_and_leave_out_what_no_item_holds() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["S", "S", "S", "S", "O"],
            "brokerName": ["a"] * 5,
            "queueId": pa.array([1, 1, 0, 7, 1], pa.int32()),
            "queueOffset": pa.array([3, 4, 8, 0, 9], pa.int64()),
        }
    )
    on_a = logical_view(batch, "S", "a", MAPPING).to_pydict()
    # (1, 4) is past the seal, queue 7 is in no item; topic O is left as it is.
    assert list(zip(on_a["topic"], on_a["queueId"], on_a["queueOffset"], strict=True)) == [
        ("S", 1, 3),
        ("S", 0, 8),
        ("O", 1, 9),
    ]
    on_b = pa.RecordBatch.from_pydict(
        {
            "topic": ["S"],
            "brokerName": ["b"],
            "queueId": pa.array([0], pa.int32()),
            "queueOffset": pa.array([2], pa.int64()),
        }
    )
    assert logical_view(on_b, "S", "b", MAPPING).to_pydict()["queueOffset"] == [6]
    assert logical_view(on_b, "S", "b", MAPPING).schema == on_b.schema


def test_rmqstore_takes_a_mapping_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    good = tmp_path / "good.json"
    doc = {
        "topic": "S",
        "queues": [
            {"queueId": q, "items": [item_doc(i) for i in items]} for q, items in enumerate(MAPPING)
        ],
    }
    good.write_text(json.dumps(doc))
    opts = StoreOptions.parse({"path": str(tmp_path), "staticTopicMapping": str(good)})
    assert opts.static == ("S", MAPPING)
    bad = tmp_path / "bad.json"
    doc["queues"][1]["items"][1]["logicalStart"] = 5  # type: ignore[index]
    bad.write_text(json.dumps(doc))
    for path, why in ((bad, "not where the previous one ends"), (tmp_path / "none", "cannot read")):
        with pytest.raises(OptionError, match=why):
            StoreOptions.parse({"path": str(tmp_path), "staticTopicMapping": str(path)})


def test_rmqstore_refuses_a_group_that_holds_no_item_of_the_topic_asked_for(
    tmp_path: Path,
) -> None:
    """Asked for the static topic alone, a store whose group holds none of its items would show
    nothing, without an error (a wrong brokerName: found by a new user's trial)."""
    (tmp_path / "commitlog").mkdir()
    mapping = tmp_path / "mapping.json"
    mapping.write_text(
        json.dumps(
            {
                "topic": "S",
                "queues": [
                    {"queueId": q, "items": [item_doc(i) for i in items]}
                    for q, items in enumerate(MAPPING)
                ],
            }
        )
    )
    opts = {"path": str(tmp_path), "staticTopicMapping": str(mapping), "topic": "S"}
    assert StoreOptions.parse({**opts, "brokerName": "b"}).broker_name == "b"
    with pytest.raises(OptionError, match=r"broker group 'c' holds no item of static topic 'S' "):
        StoreOptions.parse({**opts, "brokerName": "c"})
    # Without the topic option the store's other topics are what is read: no refusal.
    StoreOptions.parse({**opts, "brokerName": "c", "topic": ""})
