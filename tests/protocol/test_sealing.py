"""Sealed secrets: round trip, and refusal under another key, another user, or altered bytes."""

from __future__ import annotations

import pytest

from protocol.sealing import SealError, key_id, seal, unseal

KEY = b"k" * 32
NONCE = bytes(range(16))


def test_round_trip_and_no_plaintext_in_the_sealed_bytes() -> None:
    secret = b"a-secret-of-some-length-" * 3
    sealed = seal(KEY, NONCE, secret, b"alice")
    assert secret not in sealed and b"a-secret" not in sealed
    assert unseal(KEY, sealed, b"alice") == secret
    assert seal(KEY, bytes(16), secret, b"alice") != sealed  # the nonce matters


def test_another_key_user_or_altered_bytes_are_refused() -> None:
    sealed = seal(KEY, NONCE, b"password1", b"alice")
    with pytest.raises(SealError, match="does not verify"):
        unseal(b"j" * 32, sealed, b"alice")
    with pytest.raises(SealError, match="does not verify"):
        unseal(KEY, sealed, b"bob")
    altered = bytearray(sealed)
    altered[20] ^= 1
    with pytest.raises(SealError, match="does not verify"):
        unseal(KEY, bytes(altered), b"alice")
    with pytest.raises(SealError, match="known version"):
        unseal(KEY, b"\x02" + sealed[1:], b"alice")


def test_short_keys_are_refused() -> None:
    with pytest.raises(SealError, match="at least 32 bytes"):
        seal(b"short  \n", NONCE, b"x", b"alice")
    assert key_id(KEY) == key_id(KEY + b"\n") != key_id(b"j" * 32)
