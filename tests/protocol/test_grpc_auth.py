"""The official clients' authorization header, verified by protocol/grpc_auth.py against what the
official Python client (rocketmq-python-client) computes.

The official client runs in a subprocess: its generated protobuf modules register the same
symbols as ours (protocol/rocketmq_v2) and the two cannot share one process.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from protocol.grpc_auth import (
    DATE_TIME_HEADER,
    date_time_ms,
    parse_authorization,
    verify_authorization,
)
from protocol.request_auth import (
    BAD_SIGNATURE,
    EXPIRED,
    MALFORMED,
    UNKNOWN_USER,
    UNSIGNED,
    Verdict,
)

SECRETS = {"alice": "alice-secret-1"}

_OFFICIAL = """
import json, sys
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.util import ClientId
from rocketmq.v5.util.signature import Signature
out = {}
for ak, sk in json.loads(sys.argv[1]):
    config = ClientConfiguration("127.0.0.1:8081", Credentials(ak, sk))
    md = dict(Signature.metadata(config, ClientId()))
    out[ak + "/" + sk] = {k: str(v) for k, v in md.items()}
print(json.dumps(out))
"""

_PAIRS = [
    ("alice", "alice-secret-1"),
    ("alice", "wrong-secret"),
    ("mallory", "alice-secret-1"),
    ("", ""),
]


@functools.cache
def _computed() -> dict[str, dict[str, str]]:
    done = subprocess.run(
        [sys.executable, "-c", _OFFICIAL, json.dumps(_PAIRS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "No module named 'rocketmq'" in done.stderr:
        pytest.skip("the official Python client (rocketmq-python-client) is not installed")
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, str]] = json.loads(done.stdout)
    return result


def official_metadata(ak: str, sk: str) -> dict[str, str]:
    return _computed()[f"{ak}/{sk}"]


def verify(
    md: dict[str, str], *, window_ms: int | None = None, now_ms: int | None = None
) -> Verdict:
    date = md.get(DATE_TIME_HEADER)
    now = now_ms if now_ms is not None else 0
    return verify_authorization(
        md.get("authorization"), date, secret_of=SECRETS.get, now_ms=now, window_ms=window_ms
    )


def test_the_official_clients_header_verifies() -> None:
    md = official_metadata("alice", "alice-secret-1")
    auth = parse_authorization(md["authorization"])
    assert auth.access_key == "alice" and auth.signed_headers == (DATE_TIME_HEADER,)
    verdict = verify(md, window_ms=60_000, now_ms=date_time_ms(md[DATE_TIME_HEADER]) + 5_000)
    assert verdict.ok and verdict.username == "alice"


def test_a_wrong_secret_or_unknown_key_is_refused() -> None:
    assert verify(official_metadata("alice", "wrong-secret")).reason == BAD_SIGNATURE
    assert verify(official_metadata("mallory", "alice-secret-1")).reason == UNKNOWN_USER


def test_a_date_time_outside_the_window_is_expired() -> None:
    md = official_metadata("alice", "alice-secret-1")
    late = date_time_ms(md[DATE_TIME_HEADER]) + 61_000
    assert verify(md, window_ms=60_000, now_ms=late).reason == EXPIRED
    assert verify(md, window_ms=None, now_ms=late).ok  # no window: the signature alone


def test_missing_or_malformed_headers() -> None:
    md = official_metadata("alice", "alice-secret-1")
    assert verify({}).reason == UNSIGNED
    assert verify({**md, DATE_TIME_HEADER: "yesterday"}).reason == MALFORMED
    assert verify({**md, "authorization": "Basic abc"}).reason == MALFORMED
    assert verify({"authorization": md["authorization"]}).reason == MALFORMED
    # Another date than the one signed: the signature no longer matches.
    other = {**md, DATE_TIME_HEADER: "20200101T000000Z"}
    assert verify(other).reason == BAD_SIGNATURE


def test_the_header_of_a_client_without_credentials_is_unsigned() -> None:
    """The official clients send an authorization header even without credentials, with an
    empty Credential: that is a call without credentials, not a malformed one."""
    md = official_metadata("", "")
    verdict = verify(md)
    assert verdict.reason == UNSIGNED and "without an access key" in verdict.detail


def test_an_upper_case_signature_verifies() -> None:
    """The Node.js client writes the signature's hex in upper case."""
    md = official_metadata("alice", "alice-secret-1")
    upper = md["authorization"].replace(
        md["authorization"].rsplit("=", 1)[1], md["authorization"].rsplit("=", 1)[1].upper()
    )
    assert verify({**md, "authorization": upper}).ok
