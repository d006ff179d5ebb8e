"""rmq-controller's configuration: strict keys, one-line errors with exit status 2, flags over
the file, and the generated reference in docs/config-reference.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.__main__ import load_config, main
from controller.config import parse_peers
from daemon.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PEERS = "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"


@pytest.mark.parametrize(
    ("args", "toml", "names"),
    [
        (["--id", "n7", "--peers", PEERS], "", "'id'"),
        (["--peers", "n0:127.0.0.1:9878"], "", "'peers'"),
        (["--peers", "n0-127.0.0.1:9878;n0-127.0.0.1:9879"], "", "'peers'"),
        (["--metrics-port", "70000"], "", "'metrics_port'"),
        ([], "tick_ms = 0\n", "'tick_ms'"),
        ([], "snapshot_evry = 10\n", "'snapshot_evry'"),
        ([], 'enable_elect_unclean_master = "yes"\n', "'enable_elect_unclean_master'"),
        ([], "election_ticks_min = 8\nelection_ticks_max = 4\n", "'election_ticks_max'"),
        ([], "tick_ms = \n", "not valid TOML"),
    ],
)
def test_a_bad_config_stops_with_one_line_and_status_2(
    tmp_path: Path, args: list[str], toml: str, names: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(toml)
    result = CliRunner().invoke(main, ["--config", str(config), *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("rmq-controller: ")
    assert result.output.count("\n") == 1 and names in result.output


def test_flags_override_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'id = "n1"\npeers = "{PEERS}"\nmetrics_port = 9300\nsnapshot_every = 5\n')
    cfg = load_config(config, {"metrics_port": 0, "id": "n2"})
    assert (cfg.id, cfg.metrics_port, cfg.snapshot_every) == ("n2", 0, 5)
    assert cfg.address == "127.0.0.1:9858" and cfg.peer_map["n0"] == "127.0.0.1:9878"
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.toml", {})


def test_peers_parse_into_ids_and_addresses() -> None:
    assert parse_peers(" a-h:1 ; b-10.0.0.2:9000 ;") == {"a": "h:1", "b": "10.0.0.2:9000"}
    for bad in ("", "a", "a-h", "a-h:0", "-h:1", "a-h:x"):
        with pytest.raises(ValueError):
            parse_peers(bad)


def test_the_daemon_itself_exits_2_on_a_bad_flag(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "controller", "--id", "n9", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("rmq-controller: config key 'id'")
    assert proc.stderr.count("\n") == 1


def test_config_reference_matches_the_code() -> None:
    result = CliRunner().invoke(main, ["--print-config-reference"])
    assert result.exit_code == 0
    doc = (ROOT / "docs" / "config-reference.md").read_text()
    section = doc.split("## rmq-controller", 1)
    assert len(section) == 2, "docs/config-reference.md lacks its ## rmq-controller section"
    assert result.output.strip() in section[1], (
        "regenerate: rmq-controller --print-config-reference"
    )
