"""``make run``'s brokers all run from the one config file the launcher is given (deploy/daemons.py,
LocalCluster.broker_config_file), which none of them writes: a live change is kept in each
broker's data directory, ``var/broker-a-<n>/config/liveConfig.json``. No per-broker copy of the
file is made any more (it existed only for live changes to be written into). The processes:
tests/cluster/test_local_cluster.py::test_a_live_config_change_under_make_run_survives_its_restart."""

from __future__ import annotations

from pathlib import Path

from deploy.daemons import LocalCluster
from deploy.secure_mode import Security


def config_of(cluster: LocalCluster, index: int) -> Path | None:
    argv = cluster.broker_argv(index)
    return Path(argv[argv.index("--config") + 1]) if "--config" in argv else None


def data_dir_of(cluster: LocalCluster, index: int) -> Path:
    argv = cluster.broker_argv(index)
    return Path(argv[argv.index("--data-dir") + 1])


def test_every_broker_runs_from_the_given_file_and_each_has_its_own_data_dir(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared.toml"
    shared.write_text("retention_hours = 48.0\n")
    cluster = LocalCluster(tmp_path / "var", broker_config=shared)
    assert [config_of(cluster, i) for i in range(3)] == [shared] * 3
    assert [data_dir_of(cluster, i) for i in range(3)] == [
        tmp_path / "var" / f"broker-a-{i}" for i in range(3)
    ]
    assert not (tmp_path / "var").exists()  # nothing made for them before they start


def test_without_a_file_brokers_run_from_the_defaults(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "var")
    assert [config_of(cluster, i) for i in range(3)] == [None] * 3


def test_in_secure_mode_brokers_run_from_its_file(tmp_path: Path) -> None:
    security = Security(tmp_path / "var" / "secure")
    shared = tmp_path / "shared.toml"
    cluster = LocalCluster(tmp_path / "var", broker_config=shared, security=security)
    assert [config_of(cluster, i) for i in range(3)] == [security.broker_config] * 3
