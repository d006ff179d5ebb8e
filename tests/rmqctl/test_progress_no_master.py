"""consumerProgress's rows for a broker group with no master that no slave answered for: listed
from the route without figures, one note per group saying why, left out of the total."""

from __future__ import annotations

from client.routes import LOGICAL_BROKER, MessageQueue
from rmqctl.progress import ProgressRow, masterless_rows, progress_table


def test_queues_of_groups_that_did_not_answer_are_listed_without_figures() -> None:
    routed = {
        "T": [
            MessageQueue("broker-a", 0),
            MessageQueue("broker-b", 0),
            MessageQueue("broker-b", 1),
        ],
        "S": [MessageQueue(LOGICAL_BROKER, 0)],  # a static topic: its logical rows' business
        "U": [MessageQueue("broker-c", 0)],
    }
    rows, notes = masterless_rows(
        "g", routed, answered={"broker-a"}, errors={"broker-b": "connection refused"}
    )
    assert [(r.topic, r.broker_name, r.queue_id, r.no_master) for r in rows] == [
        ("T", "broker-b", 0, True),
        ("T", "broker-b", 1, True),
        ("U", "broker-c", 0, True),
    ]
    assert notes == [
        "broker-b: no master, and no slave could be asked (connection refused): its 2 queues of "
        "T are listed without figures",
        "broker-c: no master, and no slave could be asked (none of its brokers is registered "
        "with the controllers): its 1 queues of U are listed without figures",
    ]
    doc = rows[0].to_dict()
    assert (doc["maxOffset"], doc["consumerOffset"], doc["lag"], doc["noMaster"]) == (
        None,
        None,
        None,
        True,
    )

    known = ProgressRow("g", "T", "broker-a", 0, 10, 4, 6, None)
    text = progress_table("g", [known, *rows], notes)
    lines = text.splitlines()
    assert lines[2].split() == ["T", "broker-a", "0", "10", "4", "6", "-"]
    assert lines[3].split() == ["T", "broker-b", "0", "?", "?", "?", "-"]
    assert "Total lag: 6 (4 queues; 3 without figures, see the notes)" in text
    assert text.endswith(f"Note: {notes[1]}")
    assert known.to_dict()["noMaster"] is False and known.to_dict()["lag"] == 6
