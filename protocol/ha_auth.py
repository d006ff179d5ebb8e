"""Mutual authentication on the HA port, before the AutoSwitchHAService handshake: pure code.

With authentication on (``auth_enabled``), master and slave prove to each other that they hold
the cluster's auth key before a single HA message (whose layouts stay as documented) is
exchanged. Byte layout, in order::

    master -> slave  challenge  magic "RMQA" (4) . masterNonce (16)                   20 bytes
    slave  -> master answer     magic "RMQA" (4) . slaveNonce (16) . slaveProof (32)  52 bytes
    master -> slave  proof      masterProof (32)                                     32 bytes

    K           = HMAC-SHA256(auth key, "rmq-ha-v1")
    slaveProof  = HMAC-SHA256(K, "slave"  . masterNonce . slaveNonce)
    masterProof = HMAC-SHA256(K, "master" . masterNonce . slaveNonce)

The slave sends its handshake only after the master's proof verified; the master reads the
handshake only after the slave's answer verified. Fresh nonces on both sides make a recorded
exchange useless on another connection. Nonces are inputs (the drivers draw them).
"""

from __future__ import annotations

import hmac
from typing import Final

from protocol.sealing import check_key

MAGIC: Final = b"RMQA"
NONCE_BYTES: Final = 16
PROOF_BYTES: Final = 32
CHALLENGE_BYTES: Final = len(MAGIC) + NONCE_BYTES
ANSWER_BYTES: Final = len(MAGIC) + NONCE_BYTES + PROOF_BYTES


class HAAuthError(ValueError):
    """The peer did not prove it holds the cluster's auth key (or sent something else)."""


def ha_key(auth_key: bytes) -> bytes:
    """The key both sides derive from the cluster's auth key."""
    return hmac.digest(check_key(auth_key), b"rmq-ha-v1", "sha256")


def _proof(key: bytes, side: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return hmac.digest(key, side + master_nonce + slave_nonce, "sha256")


def challenge(master_nonce: bytes) -> bytes:
    if len(master_nonce) != NONCE_BYTES:
        raise ValueError(f"a nonce is {NONCE_BYTES} bytes")
    return MAGIC + master_nonce


def parse_challenge(data: bytes) -> bytes:
    """The master's nonce; HAAuthError when ``data`` is not a challenge (a master without
    authentication sends nothing first, so the slave times out instead)."""
    if len(data) != CHALLENGE_BYTES or not data.startswith(MAGIC):
        raise HAAuthError("the master did not open with an authentication challenge")
    return data[len(MAGIC) :]


def answer(key: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    if len(slave_nonce) != NONCE_BYTES:
        raise ValueError(f"a nonce is {NONCE_BYTES} bytes")
    return MAGIC + slave_nonce + _proof(key, b"slave", master_nonce, slave_nonce)


def check_answer(key: bytes, master_nonce: bytes, data: bytes) -> bytes:
    """The slave's nonce once its proof verified; HAAuthError otherwise."""
    if len(data) != ANSWER_BYTES or not data.startswith(MAGIC):
        raise HAAuthError("the peer did not answer the authentication challenge")
    slave_nonce = data[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
    expected = _proof(key, b"slave", master_nonce, slave_nonce)
    if not hmac.compare_digest(expected, data[len(MAGIC) + NONCE_BYTES :]):
        raise HAAuthError("the peer's proof does not verify: it lacks the cluster's auth key")
    return slave_nonce


def master_proof(key: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return _proof(key, b"master", master_nonce, slave_nonce)


def check_master_proof(key: bytes, master_nonce: bytes, slave_nonce: bytes, data: bytes) -> None:
    """HAAuthError unless ``data`` is the master's proof for these nonces."""
    expected = master_proof(key, master_nonce, slave_nonce)
    if len(data) != PROOF_BYTES or not hmac.compare_digest(expected, data):
        raise HAAuthError("the master's proof does not verify: it lacks the cluster's auth key")
