"""The gRPC protocol definitions (protocol/rocketmq_v2): the committed generated modules are what
the .proto files compile to, and the wire contract (names, field numbers, types, enum values,
methods) is the one the official RocketMQ 5 clients speak."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from protocol.rocketmq_v2 import definition_pb2, service_pb2

REPO = Path(__file__).resolve().parents[2]
PROTOS = ["protocol/rocketmq_v2/definition.proto", "protocol/rocketmq_v2/service.proto"]
SERVICE = "apache.rocketmq.v2.MessagingService"

# What the wire contract is made of, per symbol: fields by name (number, label, type, type name
# without its package, oneof, proto3 optional), enum values, methods (types, streaming).
Contract = dict[str, Any]


def _contract(files: list[descriptor_pb2.FileDescriptorProto]) -> Contract:
    out: Contract = {}

    def message(m: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = prefix + m.name
        out["message " + name] = {
            f.name: (
                f.number,
                f.label,
                f.type,
                f.type_name.rsplit(".", 1)[-1],
                m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else "",
                f.proto3_optional,
            )
            for f in m.field
        }
        for e in m.enum_type:
            out["enum " + name + "." + e.name] = {v.name: v.number for v in e.value}
        for n in m.nested_type:
            message(n, name + ".")

    for f in files:
        assert f.package == "apache.rocketmq.v2"
        for m in f.message_type:
            message(m, "")
        for e in f.enum_type:
            out["enum " + e.name] = {v.name: v.number for v in e.value}
        for s in f.service:
            out["service " + f.package + "." + s.name] = {
                x.name: (x.input_type, x.output_type, x.client_streaming, x.server_streaming)
                for x in s.method
            }
    return out


def _committed() -> list[descriptor_pb2.FileDescriptorProto]:
    return [
        descriptor_pb2.FileDescriptorProto.FromString(m.DESCRIPTOR.serialized_pb)
        for m in (definition_pb2, service_pb2)
    ]


def _without_json_names(
    f: descriptor_pb2.FileDescriptorProto,
) -> descriptor_pb2.FileDescriptorProto:
    """The Python generator leaves the (derived) JSON names out of the descriptor it embeds."""

    def strip(m: descriptor_pb2.DescriptorProto) -> None:
        for field in m.field:
            field.ClearField("json_name")
        for n in m.nested_type:
            strip(n)

    for m in f.message_type:
        strip(m)
    return f


def test_committed_modules_are_what_the_proto_files_compile_to(tmp_path: Path) -> None:
    include = Path(protoc.__file__).parent / "_proto"
    out = tmp_path / "set.pb"
    args = ["protoc", "-I", str(REPO), "-I", str(include), f"--descriptor_set_out={out}", *PROTOS]
    assert protoc.main(args) == 0, "the .proto files do not compile"
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    by_name = {f.name: _without_json_names(f) for f in compiled.file}
    for committed in _committed():
        assert by_name[committed.name] == committed, (
            f"{committed.name}: the committed modules are stale, run `make protos`"
        )
    # The stub module routes every method of the service under its wire path.
    stubs = (REPO / "protocol/rocketmq_v2/service_pb2_grpc.py").read_text()
    methods = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods
    assert len(methods) == 17
    for method in methods:
        assert f"'/{SERVICE}/{method.name}'" in stubs, method.name


def test_wire_facts_the_clients_depend_on() -> None:
    svc = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert svc.full_name == SERVICE
    streaming = {m.name: (m.client_streaming, m.server_streaming) for m in svc.methods}
    assert streaming["ReceiveMessage"] == (False, True)
    assert streaming["Telemetry"] == (True, True)
    assert streaming["SendMessage"] == (False, False)
    assert definition_pb2.Code.Value("OK") == 20000
    assert definition_pb2.Code.Value("MESSAGE_BODY_TOO_LARGE") == 41301
    props = definition_pb2.SystemProperties.DESCRIPTOR.fields_by_name
    assert (props["message_id"].number, props["receipt_handle"].number) == (3, 12)
    assert props["delivery_attempt"].number == 16
    # Encoded bytes of a route entry, as a client decodes them (field 2 of Broker is the id).
    broker = definition_pb2.Broker(name="g1", id=0)
    assert broker.SerializeToString() == b"\x0a\x02g1"
    entry = service_pb2.SendResultEntry(message_id="m", offset=7)
    assert entry.SerializeToString() == b"\x12\x01m\x20\x07"


_DUMP_OFFICIAL = """
import sys
from google.protobuf import descriptor_pb2
from rocketmq.grpc_protocol import definition_pb2, service_pb2
out = descriptor_pb2.FileDescriptorSet()
for m in (definition_pb2, service_pb2):
    out.file.add().ParseFromString(m.DESCRIPTOR.serialized_pb)
sys.stdout.buffer.write(out.SerializeToString())
"""


def test_every_symbol_the_official_python_client_knows_is_identical_here(tmp_path: Path) -> None:
    # The official client registers the same message names in protobuf's default pool: read its
    # descriptors in a process of their own. Ours may be newer (a superset), never different.
    done = subprocess.run(
        [sys.executable, "-c", _DUMP_OFFICIAL],
        capture_output=True,
        check=True,
        timeout=60,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    theirs = _contract(list(descriptor_pb2.FileDescriptorSet.FromString(done.stdout).file))
    ours = _contract(_committed())
    assert len(theirs) > 70
    for symbol, members in theirs.items():
        assert symbol in ours, symbol
        for member, wire in members.items():
            assert ours[symbol].get(member) == wire, f"{symbol}.{member}"
