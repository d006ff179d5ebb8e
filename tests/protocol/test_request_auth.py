"""Signed remoting requests (protocol/request_auth.py): sign, verify, refuse; time is an input."""

from __future__ import annotations

import base64
import hashlib
import hmac

import msgpack
import pytest

from protocol.codes import RequestCode
from protocol.remoting import FLAG_ONEWAY, Header, Scalar, decode_payload, encode_frame, request
from protocol.request_auth import (
    ACCESS_KEY,
    BAD_SIGNATURE,
    CLUSTER_ACCESS_KEY,
    EXPIRED,
    MALFORMED,
    NONCE,
    REPLAYED,
    SIGNATURE,
    TIMESTAMP,
    UNKNOWN_USER,
    UNSIGNED,
    VERIFIED_USER,
    Credentials,
    NonceCache,
    RequestSigner,
    Verdict,
    cluster_credentials,
    strip_auth_fields,
    verify,
)

NOW = 1_790_000_000_000
WINDOW = 60_000
ALICE = Credentials("alice", "alice-secret-1")
SECRETS = {"alice": "alice-secret-1", "bob": "bob-secret-22"}


def signed(
    header: Header | None = None,
    body: bytes | None = b"payload",
    *,
    creds: Credentials = ALICE,
    at: int = NOW,
    code: int = RequestCode.SEND_MESSAGE,
    flags: int = 0,
    signer: RequestSigner | None = None,
) -> Header:
    signer = signer or RequestSigner(creds, "p1")
    return signer.sign(code, flags, header or {"topic": "A", "queueId": 0}, body, at)


def check(
    header: dict[str, Scalar],
    body: bytes | None = b"payload",
    *,
    now: int = NOW,
    nonces: NonceCache | None = None,
    code: int = RequestCode.SEND_MESSAGE,
    flags: int = 0,
) -> Verdict:
    return verify(
        code,
        flags,
        header,
        body,
        secret_of=SECRETS.get,
        now_ms=now,
        window_ms=WINDOW,
        nonces=nonces or NonceCache(WINDOW),
    )


def test_a_signed_request_verifies_after_a_trip_over_the_wire() -> None:
    frame = request(RequestCode.SEND_MESSAGE, 7, signed({"topic": "A", "flag": 1.5}), b"payload")
    decoded = decode_payload(encode_frame(frame)[4:])
    verdict = check(decoded.header)
    assert verdict.ok and verdict.username == "alice"
    strip_auth_fields(decoded.header, "alice")
    assert decoded.header == {"topic": "A", "flag": 1.5, VERIFIED_USER: "alice"}


def test_the_secret_is_not_on_the_wire() -> None:
    wire = encode_frame(request(RequestCode.SEND_MESSAGE, 1, signed(), b"payload"))
    assert ALICE.secret_key.encode() not in wire
    assert "alice-secret-1" not in repr(ALICE)


def test_unsigned_request_is_refused() -> None:
    assert check({"topic": "A"}).reason == UNSIGNED


def test_wrong_secret_is_a_bad_signature() -> None:
    header = signed(creds=Credentials("alice", "not-alice-secret"))
    verdict = check(header)
    assert verdict.reason == BAD_SIGNATURE and "wrong secret key" in verdict.detail


@pytest.mark.parametrize(
    ("field", "value"),
    [("topic", "B"), ("queueId", 1), (TIMESTAMP, NOW + 1), (NONCE, "other"), ("extra", True)],
)
def test_any_altered_header_field_breaks_the_signature(field: str, value: Scalar) -> None:
    header = signed()
    header[field] = value
    assert check(header).reason == BAD_SIGNATURE


def test_an_altered_body_or_code_or_oneway_flag_breaks_the_signature() -> None:
    header = signed()
    assert check(dict(header), b"payloaX").reason == BAD_SIGNATURE
    assert check(dict(header), None).reason == BAD_SIGNATURE
    assert check(dict(header), code=RequestCode.PULL_MESSAGE).reason == BAD_SIGNATURE
    assert check(dict(header), flags=FLAG_ONEWAY).reason == BAD_SIGNATURE


def test_a_replayed_request_is_refused() -> None:
    nonces = NonceCache(WINDOW)
    header = signed()
    assert check(dict(header), nonces=nonces).ok
    verdict = check(dict(header), now=NOW + 1000, nonces=nonces)
    assert verdict.reason == REPLAYED and "already used" in verdict.detail
    # The next request of the same signer has another nonce.
    signer = RequestSigner(ALICE, "p2")
    assert check(signed(signer=signer), nonces=nonces).ok
    assert check(signed(signer=signer), nonces=nonces).ok


def test_expired_and_future_timestamps_are_refused() -> None:
    old = check(signed(at=NOW - WINDOW - 1))
    assert old.reason == EXPIRED and "behind" in old.detail
    ahead = check(signed(at=NOW + WINDOW + 1))
    assert ahead.reason == EXPIRED and "ahead of" in ahead.detail
    assert check(signed(at=NOW - WINDOW)).ok


def test_a_replay_after_the_window_is_expired_not_remembered() -> None:
    nonces = NonceCache(WINDOW)
    header = signed()
    assert check(dict(header), nonces=nonces).ok
    later = NOW + WINDOW + 1
    assert check(dict(header), now=later, nonces=nonces).reason == EXPIRED
    # Forgotten at the next admission, since the window refuses its replay anyway.
    assert check(signed(at=later, signer=RequestSigner(ALICE, "p9")), now=later, nonces=nonces).ok
    assert nonces.size("alice") == 1


def test_unknown_user_and_malformed_fields() -> None:
    assert check(signed(creds=Credentials("carol", "carol-secret"))).reason == UNKNOWN_USER
    header = signed()
    header[TIMESTAMP] = "soon"
    assert check(header).reason == MALFORMED
    header = signed()
    header[NONCE] = "x" * 65
    assert check(header).reason == MALFORMED
    header = signed()
    header[SIGNATURE] = "%%%"
    assert check(header).reason == BAD_SIGNATURE
    header = signed()
    header[ACCESS_KEY] = 5
    assert check(header).reason == MALFORMED


def test_a_forged_request_does_not_fill_the_nonce_cache() -> None:
    nonces = NonceCache(WINDOW)
    forged = signed(creds=Credentials("alice", "wrong-secret"))
    assert check(forged, nonces=nonces).reason == BAD_SIGNATURE
    assert nonces.size("alice") == 0


def test_a_full_cache_raises_the_floor_instead_of_growing() -> None:
    nonces = NonceCache(WINDOW, max_per_user=3)
    for i in range(5):
        assert nonces.admit("alice", f"n{i}", NOW + i, NOW) is None
    assert nonces.size("alice") == 3
    # n0 and n1 were forgotten: their replays are refused by the floor, not admitted.
    assert nonces.admit("alice", "n0", NOW + 0, NOW) is not None
    assert nonces.admit("alice", "n1", NOW + 1, NOW) is not None
    assert nonces.admit("alice", "n5", NOW + 5, NOW) is None
    assert nonces.admit("bob", "n0", NOW, NOW) is None  # per user


def test_the_signer_replaces_stale_auth_fields_and_counts_nonces() -> None:
    signer = RequestSigner(ALICE, "ab")
    first = signer.sign(10, 0, {"topic": "A", SIGNATURE: "old", NONCE: "old"}, None, NOW)
    second = signer.sign(10, 0, {"topic": "A"}, None, NOW)
    assert first[NONCE] == "ab1" and second[NONCE] == "ab2"
    assert first[SIGNATURE] != "old" and check(first, None, code=10).ok


def test_cluster_credentials_are_derived_alike_and_not_a_username() -> None:
    key = b"k" * 32
    a, b = cluster_credentials(key), cluster_credentials(key + b"\n")
    assert a == b and a.access_key == CLUSTER_ACCESS_KEY
    assert cluster_credentials(b"j" * 32).secret_key != a.secret_key
    from protocol.acl import AclError, check_username

    with pytest.raises(AclError):
        check_username(CLUSTER_ACCESS_KEY)


@pytest.mark.parametrize("secret_chars", [8, 44, 64, 65, 256])
def test_the_signature_is_hmac_sha256_of_the_documented_string(secret_chars: int) -> None:
    """The signer's prepared key (protocol.request_auth.SigningKey) against the library's HMAC
    over the string to sign built as docs/protocol.md spells it, for secrets shorter than,
    equal to and longer than SHA-256's 64-byte block (a longer key is hashed first)."""
    creds = Credentials("alice", "".join(chr(33 + i % 94) for i in range(secret_chars)))
    body = bytes(range(256)) * 3
    header = RequestSigner(creds, "p1").sign(11, FLAG_ONEWAY, {"topic": "A", "b": 2}, body, NOW)
    fields = sorted([name, value] for name, value in header.items() if name != SIGNATURE)
    string = msgpack.packb(
        ["RMQ1-HMAC-SHA256", 11, True, fields, hashlib.sha256(body).digest()], use_bin_type=True
    )
    mac = hmac.digest(creds.secret_key.encode(), string, "sha256")
    assert header[SIGNATURE] == base64.b64encode(mac).decode()
    secrets = {"alice": creds.secret_key}
    verdict = verify(
        11,
        FLAG_ONEWAY,
        header,
        body,
        secret_of=secrets.get,
        now_ms=NOW,
        window_ms=WINDOW,
        nonces=NonceCache(WINDOW),
    )
    assert verdict.ok


def test_a_signature_spelled_otherwise_is_a_bad_signature() -> None:
    """Only the one base64 spelling of the MAC is accepted: no padding, line breaks, other
    trailing bits or non-ASCII text (each a bad signature, never an exception)."""
    good = signed()
    sig = str(good[SIGNATURE])
    # The last character's 2 low bits are padding, zero in the one spelling (A, E, ..., 8):
    # the next character decodes to the same 32 bytes.
    assert base64.b64decode(sig[:-2] + chr(ord(sig[-2]) + 1) + "=") == base64.b64decode(sig)
    other_bits = sig[:-2] + chr(ord(sig[-2]) + 1) + "="
    for spelled in (sig.rstrip("="), sig + "\n", other_bits, sig[:-1] + "é", ""):
        header = dict(good)
        header[SIGNATURE] = spelled
        verdict = check(header)
        assert verdict.reason == BAD_SIGNATURE, spelled
    assert check(dict(good)).ok
