"""``make run``'s brokers each run from a config file of their own under the var dir
(deploy/daemons.py, LocalCluster.write_broker_config), which ``updateBrokerConfig`` rewrites:
made at a broker's first start, kept at the next ones. The processes themselves:
tests/cluster/test_local_cluster.py::test_a_live_config_change_under_make_run_survives_its_restart."""

from __future__ import annotations

import tomllib
from pathlib import Path

from broker.config import BrokerConfig
from broker.live_config import rewrite_key
from daemon.cli import load_config
from deploy.daemons import LocalCluster


def config_of(cluster: LocalCluster, index: int) -> Path:
    argv = cluster.broker_argv(index)
    return Path(argv[argv.index("--config") + 1])


def test_plain_make_run_gives_each_broker_its_own_file_and_keeps_a_live_change(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path / "var")
    files = [config_of(cluster, i) for i in range(3)]
    assert files == [tmp_path / "var" / f"broker-a-{i}.toml" for i in range(3)]
    for i in range(3):
        assert cluster.write_broker_config(i) == files[i]
        assert tomllib.loads(files[i].read_text()) == {}  # comments only: the defaults
    load_config(BrokerConfig, files[0], {})  # a file the broker starts from
    rewrite_key(files[0], "retention_hours", 24.0, "set live by updateBrokerConfig")
    # The next start (the next make run, or r for a dead broker) keeps it.
    again = LocalCluster(tmp_path / "var")
    again.write_broker_config(0)
    assert load_config(BrokerConfig, files[0], {}).retention_hours == 24.0
    assert tomllib.loads(files[1].read_text()) == {}


def test_the_shared_file_is_copied_and_its_later_edits_reach_each_broker(tmp_path: Path) -> None:
    shared = tmp_path / "shared.toml"
    shared.write_text("# the operator's\nretention_hours = 48.0\nmax_pull_batch = 16\n")
    cluster = LocalCluster(tmp_path / "var", broker_config=shared)
    own = cluster.write_broker_config(1)
    assert own == config_of(cluster, 1)
    assert "# the operator's\nretention_hours = 48.0\nmax_pull_batch = 16\n" in own.read_text()
    rewrite_key(own, "retention_hours", 24.0, "set live by updateBrokerConfig")
    cluster.write_broker_config(1)  # the shared file unchanged: the live change stays
    assert tomllib.loads(own.read_text()) == {"retention_hours": 24.0, "max_pull_batch": 16}

    # A key changed in the shared file since the last start is taken; the others stay.
    shared.write_text("retention_hours = 48.0\nmax_pull_batch = 8\nflush_interval_ms = 250\n")
    cluster.write_broker_config(1)
    assert tomllib.loads(own.read_text()) == {
        "retention_hours": 24.0,
        "max_pull_batch": 8,
        "flush_interval_ms": 250,
    }
    assert shared.read_text().startswith("retention_hours = 48.0\n")  # never written

    # A shared file that is not TOML: the own file is left as it is, tried again next start.
    before = own.read_text()
    shared.write_text("max_pull_batch = [\n")
    cluster.write_broker_config(1)
    assert own.read_text() == before
    shared.write_text("retention_hours = 48.0\nmax_pull_batch = 4\nflush_interval_ms = 250\n")
    cluster.write_broker_config(1)
    assert tomllib.loads(own.read_text())["max_pull_batch"] == 4
