"""A client pointed at a broker's gRPC port (the official RocketMQ 5 clients', listen port + 2)
instead of its listen port is told so. A gRPC server closes a connection whose first bytes are
no HTTP/2 preface without a byte, which read as "the peer closed the connection without
answering"; the client now asks the port again as an HTTP/2 client would
(remoting/port_probe.py). A real lone broker with its gRPC port."""

from __future__ import annotations

import pytest

from client import Producer
from client.errors import UnreachableError
from remoting.port_probe import is_settings_frame
from tests.support.cli import rmqctl
from tests.support.procs import GrpcBrokerProc, module_broker, port_open
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

broker = module_broker("grpc-port-by-mistake", GrpcBrokerProc)


@pytest.fixture(autouse=True)
def grpc_listening(broker: GrpcBrokerProc) -> None:
    wait_until(lambda: port_open(broker.grpc_port), "the gRPC port to listen", 30)


SAID = (
    "a gRPC (HTTP/2) server answered: this is a gRPC port (a broker's, for the official "
    "RocketMQ 5 clients, is its listen port + 2); connect to the listen port"
)


def test_rmqctl_at_the_grpc_port_says_it_is_one(broker: GrpcBrokerProc) -> None:
    at = f"127.0.0.1:{broker.grpc_port}"
    code, out, err = rmqctl("-a", at, "clusterList")
    assert (code, out) == (1, ""), err
    assert err == f"rmqctl: cannot reach any of {at}: {SAID}\n"
    code, out, err = rmqctl("-a", broker.address, "clusterList")
    assert code == 0 and "broker-a" in out, err


async def test_the_sdk_at_the_grpc_port_says_it_is_one(broker: GrpcBrokerProc) -> None:
    with pytest.raises(UnreachableError) as refused:
        async with Producer(f"127.0.0.1:{broker.grpc_port}", send_deadline=5) as producer:
            await producer.send("T", b"x")
    assert SAID in str(refused.value)


def test_a_settings_frame_is_told_from_other_bytes() -> None:
    assert is_settings_frame(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    assert is_settings_frame(b"\x00\x00\x0c\x04\x00\x00\x00\x00\x00")  # two settings
    assert not is_settings_frame(b"\x00\x00\x0c\x04\x00\x00\x00\x00\x01")  # stream 1
    assert not is_settings_frame(b"\x00\x00\x05\x04\x00\x00\x00\x00\x00")  # not 6 a setting
    assert not is_settings_frame(b"\x00\x00\x00\x07\x00\x00\x00\x00\x00")  # GOAWAY
    assert not is_settings_frame(b"HTTP/1.1 ")
