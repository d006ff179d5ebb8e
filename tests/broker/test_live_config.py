"""broker/live_config.py and broker/live_file.py without a broker: which keys change live, how a
value is read and checked, a change kept in ``<data_dir>/config/liveConfig.json`` (never in the
config file), the entries applied or dropped at the next start, and the hooks. The processes:
tests/cluster/test_live_config_process.py."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.config import BrokerConfig
from broker.live_config import LIVE_KEYS, ConfigRefused, LiveConfig
from broker.live_file import LiveEntry, LiveFileError, read_entries, write_entries
from daemon.config import build
from protocol.broker_requests.broker_config import ChangedLive
from protocol.codes import ResponseCode
from storage.small_file import read_atomic, write_atomic

FILE = """# broker-a, host 1
cluster = "prod"        # the cluster
flush_interval_ms = 500 # fsync period

log_level = "info"
"""

WHEN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _config(tmp_path: Path, text: str = FILE) -> tuple[BrokerConfig, Path]:
    path = tmp_path / "b.toml"
    path.write_text(text)
    return build(BrokerConfig, tomllib.loads(text), {"data_dir": str(tmp_path / "d")}), path


def _live(tmp_path: Path, text: str = FILE) -> tuple[LiveConfig, Path]:
    cfg, path = _config(tmp_path, text)
    return LiveConfig.start(cfg, path), path


def _file(tmp_path: Path) -> Path:
    return tmp_path / "d" / "config" / "liveConfig.json"


def _doc(tmp_path: Path) -> Any:
    raw = read_atomic(_file(tmp_path))
    assert raw is not None
    return json.loads(raw)


def test_every_live_key_is_a_config_key() -> None:
    assert set(LIVE_KEYS) <= {f for f in BrokerConfig.__dataclass_fields__}


def test_an_update_is_kept_in_the_data_dir_applied_and_its_hooks_run(tmp_path: Path) -> None:
    live, path = _live(tmp_path)
    seen: list[object] = []
    live.on_change("flush_interval_ms", seen.append)
    changed = live.update("flush_interval_ms", "250", "10.0.0.7:53122")
    live_file = str(_file(tmp_path).resolve())
    assert (changed.old, changed.new, changed.persisted, changed.start_value) == (
        500,
        250,
        True,
        500,
    )
    assert changed.live_file == changed.config_file == live_file
    assert live.cfg.flush_interval_ms == 250 and seen == [250]
    assert path.read_text() == FILE  # the config file is never written
    doc = _doc(tmp_path)
    assert doc["version"] == 1 and list(doc["entries"]) == ["flush_interval_ms"]
    entry = doc["entries"]["flush_interval_ms"]
    assert (entry["value"], entry["startValue"], entry["setBy"]) == (250, 500, "10.0.0.7:53122")
    assert WHEN.fullmatch(entry["setAt"])

    assert live.update("auto_create_topic", "FALSE").new is False
    assert live.update("retention_hours", "0.5").new == 0.5
    table = live.table()
    assert table.config["retention_hours"] == 0.5
    assert (table.config_file, table.live_file) == (str(path.resolve()), live_file)
    assert sorted(table.changed_live) == [
        "auto_create_topic",
        "flush_interval_ms",
        "retention_hours",
    ]
    assert table.changed_live["retention_hours"] == ChangedLive(
        start_value=72.0, set_at=table.changed_live["retention_hours"].set_at, set_by="?"
    )
    assert sorted(_doc(tmp_path)["entries"]) == sorted(table.changed_live)


def test_a_value_set_back_to_its_start_value_loses_its_entry(tmp_path: Path) -> None:
    live, _ = _live(tmp_path)
    live.update("flush_interval_ms", "250")
    live.update("flush_interval_ms", "300")
    entry = _doc(tmp_path)["entries"]["flush_interval_ms"]
    assert (entry["value"], entry["startValue"]) == (300, 500)  # the start value, not the old
    back = live.update("flush_interval_ms", "500")
    assert (back.old, back.new, back.start_value) == (300, 500, 500)
    assert _doc(tmp_path)["entries"] == {} and live.table().changed_live == {}
    assert live.cfg.flush_interval_ms == 500


@pytest.mark.parametrize(
    ("key", "text", "code", "words"),
    [
        (
            "listen",
            "127.0.0.1:1",
            ResponseCode.CONFIG_KEY_NEEDS_RESTART,
            "'listen' needs a restart",
        ),
        ("flush", "sync", ResponseCode.CONFIG_KEY_NEEDS_RESTART, "write path"),
        ("no_such_key", "1", ResponseCode.CONFIG_KEY_UNKNOWN, "unknown config key 'no_such_key'"),
        ("flush_interval_ms", "0", ResponseCode.CONFIG_VALUE_INVALID, "must be >= 1, got 0"),
        ("flush_interval_ms", "1.5", ResponseCode.CONFIG_VALUE_INVALID, "must be an integer"),
        ("auto_create_topic", "yes", ResponseCode.CONFIG_VALUE_INVALID, "must be true or false"),
        ("disk_max_used_ratio", "2", ResponseCode.CONFIG_VALUE_INVALID, "between 0.1 and 1"),
        ("log_level", "loud", ResponseCode.CONFIG_VALUE_INVALID, "must be one of debug"),
    ],
)
def test_a_refused_update_changes_nothing(
    tmp_path: Path, key: str, text: str, code: ResponseCode, words: str
) -> None:
    live, path = _live(tmp_path)
    live.update("max_pull_batch", "7")
    before = (path.read_bytes(), _file(tmp_path).read_bytes(), live.table())
    with pytest.raises(ConfigRefused) as refusal:
        live.update(key, text)
    assert refusal.value.code == code and words in refusal.value.remark
    assert (path.read_bytes(), _file(tmp_path).read_bytes(), live.table()) == before


def test_a_live_file_that_cannot_be_written_refuses_the_change(tmp_path: Path) -> None:
    live, _ = _live(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config").write_text("a file where the directory should be")
    with pytest.raises(ConfigRefused) as refusal:
        live.update("flush_interval_ms", "250")
    assert refusal.value.code == ResponseCode.CONFIG_NOT_PERSISTED
    assert "'flush_interval_ms' not changed: cannot write" in refusal.value.remark
    assert str(_file(tmp_path).resolve()) in refusal.value.remark
    assert live.cfg.flush_interval_ms == 500 and live.table().changed_live == {}


def test_without_a_config_file_a_change_is_kept_too(tmp_path: Path) -> None:
    cfg = build(BrokerConfig, {}, {"data_dir": str(tmp_path / "d")})
    live = LiveConfig.start(cfg, None)
    changed = live.update("max_pull_batch", "7")
    assert (changed.persisted, changed.live_file, cfg.max_pull_batch) == (
        True,
        str(_file(tmp_path).resolve()),
        7,
    )
    assert live.table().config_file is None
    again = build(BrokerConfig, {}, {"data_dir": str(tmp_path / "d")})
    LiveConfig.start(again, None)
    assert again.max_pull_batch == 7


def test_the_config_reference_lists_every_live_key_with_its_effect() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "config-reference.md").read_text()
    rows = "\n".join(f"| `{k}` | {v} |" for k, v in LIVE_KEYS.items())
    assert f"| key | takes effect |\n|---|---|\n{rows}\n\n" in doc


def test_a_hook_that_fails_puts_everything_back(tmp_path: Path) -> None:
    live, _ = _live(tmp_path)
    live.update("flush_interval_ms", "400")
    file_before = _file(tmp_path).read_bytes()
    seen: list[object] = []

    def hook(value: object) -> None:
        seen.append(value)
        if value == 250:
            raise RuntimeError("the flusher is gone")

    live.on_change("flush_interval_ms", hook)
    with pytest.raises(ConfigRefused) as refusal:
        live.update("flush_interval_ms", "250")
    assert refusal.value.code == ResponseCode.SYSTEM_ERROR
    assert "applying it failed (RuntimeError: the flusher is gone)" in refusal.value.remark
    assert live.cfg.flush_interval_ms == 400 and seen == [250, 400]
    assert _file(tmp_path).read_bytes() == file_before
    assert live.entries["flush_interval_ms"].value == 400


# -- at start --------------------------------------------------------------------------------------


def _kept(tmp_path: Path, entries: dict[str, LiveEntry]) -> None:
    write_entries(_file(tmp_path), entries)


def test_at_start_an_entry_whose_start_value_is_still_the_files_is_applied(
    tmp_path: Path,
) -> None:
    _kept(tmp_path, {"flush_interval_ms": LiveEntry(250, 500, "2026-11-29T08:30:00Z", "1.2.3.4:5")})
    cfg, path = _config(tmp_path)
    with structlog.testing.capture_logs() as logs:
        live = LiveConfig.start(cfg, path)
    assert cfg.flush_interval_ms == 250
    assert live.start_values["flush_interval_ms"] == 500
    (line,) = logs
    assert line["log_level"] == "info" and line["key"] == "flush_interval_ms"
    assert line["event"] == (
        "live config change of flush_interval_ms applied: 250, set at 2026-11-29T08:30:00Z; "
        f"the config file {path} says 500"
    )
    # Set back to the file's value: the entry goes.
    live.update("flush_interval_ms", "500")
    assert read_entries(_file(tmp_path)) == {}


def test_at_start_the_config_file_changed_since_wins_and_the_entry_is_dropped(
    tmp_path: Path,
) -> None:
    _kept(
        tmp_path,
        {
            "flush_interval_ms": LiveEntry(250, 500, "2026-11-29T08:30:00Z", "1.2.3.4:5"),
            "max_pull_batch": LiveEntry(7, 256, "2026-11-29T08:31:00Z", "1.2.3.4:5"),
        },
    )
    cfg, path = _config(
        tmp_path, FILE.replace("flush_interval_ms = 500", "flush_interval_ms = 800")
    )
    with structlog.testing.capture_logs() as logs:
        live = LiveConfig.start(cfg, path)
    assert (cfg.flush_interval_ms, cfg.max_pull_batch) == (800, 7)
    (warning,) = [line for line in logs if line["log_level"] == "warning"]
    assert warning["event"] == (
        "live config change of flush_interval_ms dropped: the config file (or a flag) changed "
        "flush_interval_ms since, to 800, which wins over the live value 250"
    )
    assert (warning["value"], warning["live_value"]) == (800, 250)
    assert live.dropped and list(live.entries) == ["max_pull_batch"]
    live.save_dropped()  # once the data directory is known to be this broker's
    assert read_entries(_file(tmp_path)) == {
        "max_pull_batch": LiveEntry(7, 256, "2026-11-29T08:31:00Z", "1.2.3.4:5")
    }


@pytest.mark.parametrize(
    ("key", "entry", "words"),
    [
        ("listen", LiveEntry("127.0.0.1:1", "127.0.0.1:10911", "t", "p"), "not a live config key"),
        ("gone_key", LiveEntry(1, 2, "t", "p"), "gone_key is not a live config key now"),
        ("flush_interval_ms", LiveEntry(0, 500, "t", "p"), "'flush_interval_ms' must be >= 1"),
        ("log_level", LiveEntry(3, "info", "t", "p"), "'log_level' must be a string"),
    ],
)
def test_at_start_an_entry_no_longer_live_or_valid_is_dropped_with_a_warning(
    tmp_path: Path, key: str, entry: LiveEntry, words: str
) -> None:
    _kept(tmp_path, {key: entry})
    cfg, path = _config(tmp_path)
    with structlog.testing.capture_logs() as logs:
        live = LiveConfig.start(cfg, path)
    assert cfg == build(BrokerConfig, tomllib.loads(FILE), {"data_dir": str(tmp_path / "d")})
    (warning,) = logs
    assert warning["log_level"] == "warning" and words in warning["event"]
    assert warning["event"].startswith(f"live config change of {key} dropped: ")
    live.save_dropped()
    assert read_entries(_file(tmp_path)) == {}


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (None, "live config changes file unreadable: "),
        (b"[1, 2]", "is not a live config changes file"),
        (b'{"version": 1, "entries": {"max_pull_batch": 7}}', "is not a live config changes file"),
        (b'{"version": 2, "entries": {}}', "is not a live config changes file"),
        (b"\xff\xfe", "is not a live config changes file"),
    ],
)
def test_a_damaged_live_file_is_refused_naming_it(
    tmp_path: Path, payload: bytes | None, words: str
) -> None:
    path = _file(tmp_path)
    path.parent.mkdir(parents=True)
    if payload is None:
        path.write_bytes(b"garbage, no checksum")  # and no .bak
    else:
        write_atomic(path, payload)  # checksummed: it reads, but is not a live changes file
    cfg, config = _config(tmp_path)
    with pytest.raises(LiveFileError) as refusal:
        LiveConfig.start(cfg, config)
    message = str(refusal.value)
    assert words in message and "liveConfig.json" in message and "\n" not in message
    assert "move liveConfig.json and liveConfig.json.bak aside" in message
    assert "start with the config file's values" in message
