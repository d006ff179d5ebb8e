"""The shipped production config (deploy/config/host1) serves the official clients' gRPC over
TLS only: a broker started from it, beside a controller started from its host's n0.toml (both
with the files deploy/security.sh makes, loopback addresses and test ports substituted), answers
a signed call on its TLS gRPC port and refuses a plaintext one on the default plaintext port
(listen port + 2). With ``grpc_plaintext_with_tls = true`` added it serves plaintext as well
and logs, once, why that is a risk with authentication on.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import grpc
import pytest

from client import Credentials
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from tests.cluster.test_grpc_authentication import signed
from tests.deploy.support import make_security_files, require_tool
from tests.support.procs import Daemon, free_port, port_open, rmqctl
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

ROOT_DIR = Path(__file__).resolve().parents[2]
HOST1 = ROOT_DIR / "deploy" / "config" / "host1"
ROOT = Credentials("root", "root-Secret-4242")
RISK = "plaintext gRPC port with authentication on"
# A channel of its own connections: grpcio shares them between channels otherwise, and one
# refused a moment ago would wait out its reconnect backoff.
OWN_SUBCHANNELS = [("grpc.use_local_subchannel_pool", 1)]


def shipped(path: Path, security: Path, out: Path, **values: str | int | bool) -> Path:
    """``path`` as shipped, its /etc/rmq files taken from ``security`` and each key of
    ``values`` set (replacing its line, or its commented-out default), written to ``out``."""
    text = path.read_text().replace('"/etc/rmq/', f'"{security}/')
    for key, value in values.items():
        line = f"{key} = {json.dumps(value)}"
        text, n = re.subn(rf"^(# )?{key} =.*$", line, text, count=1, flags=re.M)
        assert n == 1, f"{path.name} has no key {key}"
    out.write_text(text)
    return out


def json_lines(log: str) -> list[dict[str, object]]:
    out = []
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


async def query_route(channel: grpc.aio.Channel) -> int:
    """A signed QueryRoute's status code (gRPC errors raise :class:`grpc.aio.AioRpcError`)."""
    stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
    answer = await stub.QueryRoute(
        rpc.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")),
        metadata=signed(ROOT),
        timeout=5,
    )
    code: int = answer.status.code
    return code


async def test_a_broker_from_the_shipped_config_serves_grpc_over_tls_only(tmp_path: Path) -> None:
    require_tool("openssl", "openssl")
    security = make_security_files(tmp_path / "etc-rmq")
    ca = (security / "tls" / "ca.crt").read_bytes()
    c_port, listen, tls_port = free_port(), free_port(), free_port()
    controller = Daemon(
        "n0",
        [
            sys.executable, "-m", "controller", "--config",
            str(shipped(
                HOST1 / "n0.toml", security, tmp_path / "n0.toml",
                peers=f"n0-127.0.0.1:{c_port}", data_dir=str(tmp_path / "n0"), metrics_port=0,
            )),
        ],
        tmp_path / "n0.log",
    )  # fmt: skip
    config: dict[str, str | int | bool] = dict(
        listen=f"127.0.0.1:{listen}",
        ha_port=free_port(),
        grpc_tls_listen=f"127.0.0.1:{tls_port}",
        controllers=f"127.0.0.1:{c_port}",
        data_dir=str(tmp_path / "broker-a"),
        metrics_port=0,
    )
    broker_config = shipped(HOST1 / "broker-a.toml", security, tmp_path / "broker-a.toml", **config)
    broker = Daemon(
        "broker-a", [sys.executable, "-m", "broker", "--config", str(broker_config)],
        tmp_path / "broker-a.log",
    )  # fmt: skip
    plain_endpoint = f"127.0.0.1:{listen + 2}"  # grpc_listen's default: listen port + 2
    tls = grpc.ssl_channel_credentials(root_certificates=ca)

    def logs() -> str:
        return controller.log() + broker.log()

    try:
        controller.start()
        wait_until(lambda: port_open(c_port), "the controller to listen", 30, on_timeout=logs)
        cert, key = security / "tls" / "node.crt", security / "tls" / "node.key"
        done = rmqctl(
            "-a", f"127.0.0.1:{c_port}", "--ca-file", str(security / "tls" / "ca.crt"),
            "--auth-key-file", str(security / "auth.key"), "--cert", str(cert), "--key", str(key),
            "createUser", "-u", ROOT.access_key, "-p", ROOT.secret_key, "-t", "Super",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + logs()

        broker.start()
        wait_until(lambda: port_open(tls_port), "the gRPC TLS port", 30, on_timeout=logs)

        async def tls_answers() -> bool:  # once the broker's user cache has ROOT
            async with grpc.aio.secure_channel(f"127.0.0.1:{tls_port}", tls) as channel:
                return await query_route(channel) == pb.TOPIC_NOT_FOUND

        await wait_until_async(tls_answers, "a signed call over TLS", 30, on_timeout=logs)
        async with grpc.aio.insecure_channel(plain_endpoint, options=OWN_SUBCHANNELS) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await query_route(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
        (serving,) = [e for e in json_lines(broker.log()) if e.get("event") == "broker serving"]
        assert serving["grpc_port"] is None and serving["grpc_tls_port"] == tls_port, serving
        assert RISK not in broker.log()
        assert broker.stop() == 0, logs()

        # The operator's explicit choice: plaintext as well, and one warning saying why not.
        text = broker_config.read_text()
        broker_config.write_text(
            text.replace("# grpc_plaintext_with_tls = false", "grpc_plaintext_with_tls = true")
        )
        assert "\ngrpc_plaintext_with_tls = true\n" in broker_config.read_text()
        broker.log_path.write_text("")
        broker.start()
        wait_until(lambda: port_open(listen + 2), "the plaintext gRPC port", 30, on_timeout=logs)

        async def plain_answers() -> bool:
            async with grpc.aio.insecure_channel(plain_endpoint, options=OWN_SUBCHANNELS) as ch:
                return await query_route(ch) == pb.TOPIC_NOT_FOUND

        await wait_until_async(plain_answers, "a signed plaintext call", 30, on_timeout=logs)
        assert await tls_answers()
        (risk,) = [e for e in json_lines(broker.log()) if e.get("event") == RISK]
        assert risk["level"] == "warning" and risk["grpc_port"] == listen + 2, risk
        assert "nonce" in str(risk["why"]) and "replayed" in str(risk["why"]), risk
    finally:
        broker.stop()
        controller.stop()
