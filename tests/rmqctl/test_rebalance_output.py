"""rmqctl rebalancePlan's table and rebalanceApply's plan file checks (no cluster needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.rebalance import QueueTraffic, plan_moves
from rmqctl.common import CommandError
from rmqctl.rebalance import _plan_human, read_moves


def test_the_plan_reads_as_a_table() -> None:
    plan = plan_moves(
        {"broker-a": 200.0, "broker-b": 0.0},
        [QueueTraffic("orders", i, "broker-a", 50.0) for i in range(4)],
        {("logs", "broker-a"): 0.5},
        threshold=60,
        rate="msg/s",
    )
    text = _plan_human(plan.doc())
    assert "Groups: broker-a 200 -> 100, broker-b 0 -> 100" in text
    assert "Spread: 200 -> 0" in text
    lines = text.splitlines()
    assert lines[3].split() == ["Topic", "Queue", "From", "To", "Msg/s"]
    assert lines[4].split() == ["orders", "0", "broker-a", "broker-b", "50"]
    assert "Cannot move (ordinary topics):" in text and "logs" in lines[-1]
    quiet = _plan_human(plan_moves({"a": 1.0, "b": 0.0}, [], {}, threshold=5).doc())
    assert "Note: spread 1.000 msg/s is within the threshold 5" in quiet
    assert quiet.endswith("No queue to move.")


def test_a_plan_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    move = {"topic": "orders", "queue": 1, "from": "a", "to": "b", "msgPerSec": 3.0}
    path.write_text(json.dumps({"moves": [move]}))
    assert read_moves(str(path)) == [("orders", 1, "a", "b")]
    path.write_text(json.dumps({"moves": []}))
    assert read_moves(str(path)) == []
    with pytest.raises(CommandError, match="cannot read plan"):
        read_moves(str(tmp_path / "missing.json"))
    path.write_text(json.dumps({"moves": [{**move, "queue": True}]}))
    with pytest.raises(CommandError, match='move 1 must have "topic": str, "queue": int'):
        read_moves(str(path))


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ("[1,", "cannot read traffic job plan"),
        ("[]", 'not a traffic job plan (a JSON object with "moves")'),
        ('{"moves": [{"to": "b"}], "threshold": 1, "groupsBefore": {}}', "move 1 must be"),
        ('{"moves": [], "threshold": "x", "groupsBefore": {}}', '"threshold" and "groupsBefore"'),
    ],
)
def test_a_malformed_traffic_job_plan_is_one_line(tmp_path: Path, doc: str, error: str) -> None:
    from click.testing import CliRunner

    from rmqctl.cli import cli

    path = tmp_path / "plan.json"
    path.write_text(doc)
    result = CliRunner().invoke(cli, ["rebalancePlan", "-a", "127.0.0.1:1", "--from", str(path)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and error in result.stderr, result.stderr
