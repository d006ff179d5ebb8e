"""The exchange before the HA handshake (protocol/ha_auth.py): both sides prove they hold the
cluster's auth key; a recorded or forged exchange does not verify."""

from __future__ import annotations

import os

import pytest

from protocol import ha_auth

KEY = ha_auth.ha_key(b"k" * 32)
OTHER = ha_auth.ha_key(b"j" * 32)


def test_both_sides_verify_with_the_same_key() -> None:
    mn, sn = os.urandom(16), os.urandom(16)
    sent = ha_auth.challenge(mn)
    assert len(sent) == ha_auth.CHALLENGE_BYTES and ha_auth.parse_challenge(sent) == mn
    answer = ha_auth.answer(KEY, mn, sn)
    assert len(answer) == ha_auth.ANSWER_BYTES
    assert ha_auth.check_answer(KEY, mn, answer) == sn
    proof = ha_auth.master_proof(KEY, mn, sn)
    ha_auth.check_master_proof(KEY, mn, sn, proof)


def test_another_key_a_replayed_answer_or_a_handshake_do_not_verify() -> None:
    mn, sn = os.urandom(16), os.urandom(16)
    with pytest.raises(ha_auth.HAAuthError, match="lacks the cluster's auth key"):
        ha_auth.check_answer(KEY, mn, ha_auth.answer(OTHER, mn, sn))
    recorded = ha_auth.answer(KEY, mn, sn)
    with pytest.raises(ha_auth.HAAuthError):  # another connection, another master nonce
        ha_auth.check_answer(KEY, os.urandom(16), recorded)
    with pytest.raises(ha_auth.HAAuthError, match="did not answer"):
        ha_auth.check_answer(KEY, mn, b"\x00\x00\x00\x01" + bytes(48))  # a slave handshake
    with pytest.raises(ha_auth.HAAuthError):
        ha_auth.check_master_proof(KEY, mn, sn, ha_auth.master_proof(OTHER, mn, sn))
    with pytest.raises(ha_auth.HAAuthError):  # the slave's proof is not the master's
        ha_auth.check_master_proof(KEY, mn, sn, recorded[20:])
    with pytest.raises(ha_auth.HAAuthError, match="challenge"):
        ha_auth.parse_challenge(b"\x00\x00\x00\x01" + bytes(16))
