"""resetOffsetByTime's time (-s) and its refusals before any request: now, a time ago, epoch
ms, ISO 8601 and mqadmin's yyyy-MM-dd#HH:mm:ss:SSS read as epoch ms; a time in the future is one
line and exit status 1; what is not a time is a usage error (exit status 2). Nothing here
reaches a broker (the address is a closed port)."""

from __future__ import annotations

import time

import click
import pytest
from click.testing import CliRunner

from rmqctl.cli import cli
from rmqctl.common import PastTimeType
from tests.support.procs import dead_address


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
        ("2023-11-14#22:13:20:000", 1_700_000_000_000),
        ("2023-11-14#22:13:20:250", 1_700_000_000_250),
    ],
)
def test_absolute_times_read_as_epoch_ms(text: str, ms: int) -> None:
    assert PastTimeType().convert(text, None, None) == ms


@pytest.mark.parametrize(
    ("text", "ago_ms"),
    [("now", 0), ("-500ms", 500), ("-90s", 90_000), ("-30m", 1_800_000), ("-1h", 3_600_000),
     ("-2d", 172_800_000)],
)  # fmt: skip
def test_relative_times_count_back_from_now(text: str, ago_ms: int) -> None:
    before = int(time.time() * 1000)
    value = PastTimeType().convert(text, None, None)
    after = int(time.time() * 1000)
    assert before - ago_ms <= value <= after - ago_ms


@pytest.mark.parametrize("text", ["yesterday", "-1w", "1h", "14/11/2023", ""])
def test_anything_else_is_a_usage_error(text: str) -> None:
    with pytest.raises(click.BadParameter, match="is not a time"):
        PastTimeType().convert(text, None, None)
    done = CliRunner().invoke(
        cli, ["resetOffsetByTime", "-a", dead_address(), "-g", "g", "-t", "T", "-s", text]
    )
    assert done.exit_code == 2, done.output


def test_a_time_in_the_future_is_refused_before_any_request() -> None:
    future = str(int(time.time() * 1000) + 3_600_000)
    done = CliRunner().invoke(
        cli, ["resetOffsetByTime", "-a", dead_address(), "-g", "g", "-t", "T", "-s", future]
    )
    assert done.exit_code == 1
    assert "is in the future" in done.output and "nothing reset" in done.output
    assert len(done.output.strip().splitlines()) == 1, done.output
