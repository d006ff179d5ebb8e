"""broker/live_config.py without a broker: which keys change live, how a value is read and
checked, the config file's one line rewritten (comments and other lines kept), and the hooks."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.live_config import LIVE_KEYS, ConfigFileError, ConfigRefused, LiveConfig, rewrite_key
from daemon.config import build
from protocol.codes import ResponseCode

FILE = """# broker-a, host 1
cluster = "prod"        # the cluster
flush_interval_ms = 500 # fsync period

log_level = "info"
"""


def test_every_live_key_is_a_config_key() -> None:
    assert set(LIVE_KEYS) <= {f for f in BrokerConfig.__dataclass_fields__}


def test_a_keys_line_is_replaced_and_every_other_line_kept(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(FILE)
    path.chmod(0o640)
    rewrite_key(path, "flush_interval_ms", 250, "set live (was 500)")
    lines = path.read_text().splitlines()
    assert lines == [
        "# broker-a, host 1",
        'cluster = "prod"        # the cluster',
        "flush_interval_ms = 250  # set live (was 500)",
        "",
        'log_level = "info"',
    ]
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_key_not_in_the_file_is_added_after_the_last_top_level_key(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(FILE + "\n[extra]\nx = 1\n")
    rewrite_key(path, "retention_hours", 12.5, "set live")
    rewrite_key(path, "log_level", "debug", "set live")
    doc = tomllib.loads(path.read_text())
    assert doc["retention_hours"] == 12.5 and doc["log_level"] == "debug"
    assert doc["extra"] == {"x": 1}
    assert path.read_text().index("retention_hours") < path.read_text().index("[extra]")


def test_a_file_that_would_not_read_back_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('log_level = """\ninfo"""\n')
    with pytest.raises(ConfigFileError, match="cannot rewrite log_level"):
        rewrite_key(path, "log_level", "debug", "set live")
    assert path.read_text() == 'log_level = """\ninfo"""\n'
    path.write_text("not toml [")
    with pytest.raises(ConfigFileError, match="not valid TOML"):
        rewrite_key(path, "log_level", "debug", "set live")


def _live(tmp_path: Path, text: str = FILE) -> tuple[LiveConfig, Path]:
    path = tmp_path / "b.toml"
    path.write_text(text)
    cfg = build(BrokerConfig, tomllib.loads(text), {"data_dir": str(tmp_path / "d")})
    return LiveConfig(cfg, path), path


def test_an_update_is_written_applied_and_its_hooks_run(tmp_path: Path) -> None:
    live, path = _live(tmp_path)
    seen: list[object] = []
    live.on_change("flush_interval_ms", seen.append)
    changed = live.update("flush_interval_ms", "250")
    assert (changed.old, changed.new, changed.persisted) == (500, 250, True)
    assert live.cfg.flush_interval_ms == 250 and seen == [250]
    assert tomllib.loads(path.read_text())["flush_interval_ms"] == 250
    assert live.update("auto_create_topic", "FALSE").new is False
    assert live.update("retention_hours", "0.5").new == 0.5
    assert live.table().config["retention_hours"] == 0.5


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
    before = (path.read_text(), live.table())
    with pytest.raises(ConfigRefused) as refusal:
        live.update(key, text)
    assert refusal.value.code == code and words in refusal.value.remark
    assert (path.read_text(), live.table()) == before


def test_a_file_that_cannot_be_written_refuses_the_change(tmp_path: Path) -> None:
    live, path = _live(tmp_path)
    path.unlink()
    with pytest.raises(ConfigRefused) as refusal:
        live.update("flush_interval_ms", "250")
    assert refusal.value.code == ResponseCode.CONFIG_NOT_PERSISTED
    assert live.cfg.flush_interval_ms == 500


def test_without_a_config_file_a_change_is_live_only(tmp_path: Path) -> None:
    cfg = build(BrokerConfig, {}, {"data_dir": str(tmp_path / "d")})
    live = LiveConfig(cfg, None)
    changed = live.update("max_pull_batch", "7")
    assert (changed.persisted, changed.config_file, cfg.max_pull_batch) == (False, None, 7)


def test_the_config_reference_lists_every_live_key_with_its_effect() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "config-reference.md").read_text()
    rows = "\n".join(f"| `{k}` | {v} |" for k, v in LIVE_KEYS.items())
    assert f"| key | takes effect |\n|---|---|\n{rows}\n\n" in doc


def test_a_hook_that_fails_puts_everything_back(tmp_path: Path) -> None:
    live, path = _live(tmp_path)
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
    assert live.cfg.flush_interval_ms == 500 and seen == [250, 500]
    assert tomllib.loads(path.read_text())["flush_interval_ms"] == 500
