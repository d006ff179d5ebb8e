"""Sealing user secrets under the cluster's auth key: encrypt-then-MAC from the standard library.

Why not a one-way hash: the request signatures of the official RocketMQ clients (and of our own
scheme, later) are an HMAC of the request keyed with the user's secret, so the server must be able
to recover the secret. The controllers therefore keep each secret encrypted under a key that is
not stored with the data (the ``auth_key_file`` every controller reads), and the Raft log, its
snapshots and every answer hold only the sealed form.

Construction (no third-party cryptography package is a dependency): from the key material K,
``Ke = HMAC-SHA256(K, "rmq-seal-enc")`` and ``Km = HMAC-SHA256(K, "rmq-seal-mac")``; the plaintext
is XORed with the keystream ``HMAC-SHA256(Ke, nonce || counter32)`` (HMAC as a PRF in counter
mode) and ``tag = HMAC-SHA256(Km, version || nonce || len(context) || context || ciphertext)``.
The context (the username) is bound in, so a sealed secret cannot be moved to another user.
Layout: ``version (1 byte, 1) || nonce (16) || ciphertext || tag (32)``. The nonce is an input
(the caller draws it from ``os.urandom``): this module does no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

SEAL_VERSION: Final = 1
NONCE_BYTES: Final = 16
TAG_BYTES: Final = 32
MIN_KEY_BYTES: Final = 32
_BLOCK: Final = 32


class SealError(ValueError):
    """A sealed value that is malformed or was not sealed under this key for this context."""


def _derive(key: bytes, label: bytes) -> bytes:
    return hmac.new(key, label, hashlib.sha256).digest()


def check_key(key: bytes) -> bytes:
    """Key material of at least MIN_KEY_BYTES bytes (surrounding whitespace ignored)."""
    material = key.strip()
    if len(material) < MIN_KEY_BYTES:
        raise SealError(f"auth key must hold at least {MIN_KEY_BYTES} bytes, not {len(material)}")
    return material


def key_id(key: bytes) -> str:
    """A short public fingerprint of the key (to tell two controllers' keys apart in logs)."""
    return _derive(check_key(key), b"rmq-seal-id")[:6].hex()


def _keystream_xor(key: bytes, nonce: bytes, data: bytes) -> bytes:
    out = bytearray(len(data))
    for start in range(0, len(data), _BLOCK):
        block = hmac.new(key, nonce + (start // _BLOCK).to_bytes(4, "big"), hashlib.sha256).digest()
        chunk = data[start : start + _BLOCK]
        out[start : start + len(chunk)] = bytes(a ^ b for a, b in zip(chunk, block, strict=False))
    return bytes(out)


def _tag(mac_key: bytes, nonce: bytes, context: bytes, ciphertext: bytes) -> bytes:
    message = bytes([SEAL_VERSION]) + nonce + len(context).to_bytes(4, "big") + context + ciphertext
    return hmac.new(mac_key, message, hashlib.sha256).digest()


def seal(key: bytes, nonce: bytes, plaintext: bytes, context: bytes) -> bytes:
    """``plaintext`` encrypted and authenticated under ``key``, bound to ``context``."""
    material = check_key(key)
    if len(nonce) != NONCE_BYTES:
        raise SealError(f"nonce must be {NONCE_BYTES} bytes")
    ciphertext = _keystream_xor(_derive(material, b"rmq-seal-enc"), nonce, plaintext)
    tag = _tag(_derive(material, b"rmq-seal-mac"), nonce, context, ciphertext)
    return bytes([SEAL_VERSION]) + nonce + ciphertext + tag


def unseal(key: bytes, sealed: bytes, context: bytes) -> bytes:
    """The plaintext of ``sealed``; SealError when it is malformed, was sealed under another
    key, or for another context."""
    material = check_key(key)
    if len(sealed) < 1 + NONCE_BYTES + TAG_BYTES or sealed[0] != SEAL_VERSION:
        raise SealError("not a sealed value of a known version")
    nonce = sealed[1 : 1 + NONCE_BYTES]
    ciphertext = sealed[1 + NONCE_BYTES : -TAG_BYTES]
    expected = _tag(_derive(material, b"rmq-seal-mac"), nonce, context, ciphertext)
    if not hmac.compare_digest(expected, sealed[-TAG_BYTES:]):
        raise SealError("sealed value does not verify (another auth key, or altered)")
    return _keystream_xor(_derive(material, b"rmq-seal-enc"), nonce, ciphertext)
