"""deploy/config/: generated from the config classes, loadable by the daemons, a sound layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from controller.config import ControllerConfig
from daemon.config import reference
from tests.deploy.support import load_example, make_security_files

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "config"
HOSTS = sorted(CONFIG.glob("host*"))


def configs() -> list[tuple[Path, type[Any]]]:
    out: list[tuple[Path, type[Any]]] = []
    for path in sorted(CONFIG.glob("host*/*.toml")):
        out.append((path, BrokerConfig if path.stem.startswith("broker-") else ControllerConfig))
    return out


def test_the_files_are_what_the_code_generates() -> None:
    result = subprocess.run(
        [sys.executable, str(CONFIG / "render.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def security(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_security_files(tmp_path_factory.mktemp("etc-rmq"))


@pytest.mark.parametrize("path,cls", configs(), ids=lambda v: getattr(v, "name", ""))
def test_each_file_loads_and_documents_every_key(
    path: Path, cls: type[Any], security: Path
) -> None:
    # Raises ConfigError naming a bad key, or a key file that is missing or readable by others.
    config = load_example(cls, path, security)
    assert config.auth_enabled and config.tls_enabled and config.tls_verify_client
    text = path.read_text()
    for key, _tp, _default, meaning in reference(cls):
        assert f"# {meaning}" in text, f"{path.name}: meaning of {key} missing"
        assert f"\n{key} = " in text or f"\n# {key} =" in text, f"{path.name}: {key} missing"


def test_layout_three_controllers_two_groups_of_three_masters_spread(security: Path) -> None:
    assert len(HOSTS) == 3
    controllers = [
        load_example(ControllerConfig, p, security) for h in HOSTS for p in h.glob("n*.toml")
    ]
    assert sorted(c.id for c in controllers) == ["n0", "n1", "n2"]
    assert len({c.peers for c in controllers}) == 1, "peers must be the same on every controller"
    addresses = set(controllers[0].peer_map.values())
    preferred: dict[str, str] = {}
    for host in HOSTS:
        (controller,) = [load_example(ControllerConfig, p, security) for p in host.glob("n*.toml")]
        ip = controller.host
        brokers = [
            load_example(BrokerConfig, p, security) for p in sorted(host.glob("broker-*.toml"))
        ]
        assert [b.broker_name for b in brokers] == ["broker-a", "broker-b"]
        ports = [controller.port, controller.metrics_port]
        for b in brokers:
            assert b.listen_host == ip, f"{host.name}: {b.broker_name} listens on another host"
            assert set(b.controller_addresses) == addresses
            assert b.min_in_sync_replicas == 2
            ports += [b.listen_port, b.effective_ha_port, b.metrics_port]
            # gRPC over TLS only: no plaintext gRPC port beside TLS (grpc_plaintext_with_tls).
            assert b.grpc_endpoint is None, f"{host.name}: {b.broker_name} serves plaintext gRPC"
            assert b.grpc_tls_listen is not None
            tls_host, _, tls_port = b.grpc_tls_listen.rpartition(":")
            assert tls_host == ip, f"{host.name}: {b.broker_name}'s gRPC TLS port on another host"
            ports.append(int(tls_port))
            if b.election_priority == 0:
                preferred[b.broker_name] = host.name
        assert len(ports) == len(set(ports)), f"{host.name}: two daemons share a port"
    # Every group has exactly one preferred master, and they are on different hosts.
    assert sorted(preferred) == ["broker-a", "broker-b"]
    assert len(set(preferred.values())) == 2
