"""Signed remoting requests: who sent a request, proven without the secret on the wire.

A client holding an access key (the username) and its secret adds four header fields to every
request it sends::

    AccessKey  the username
    Timestamp  the client's clock when it signed, epoch milliseconds (int)
    Nonce      a string unique among the requests of this access key (1..64 characters)
    Signature  base64 of HMAC-SHA256(secret, string_to_sign), padded (the one spelling)

    string_to_sign = msgpack([ "RMQ1-HMAC-SHA256", code, oneway (bool),
                               [[name, value] for every other header field, by name],
                               SHA-256 of the body (bin) or nil when there is no body ])

So the signature covers the request code, every header field (AccessKey, Timestamp and Nonce
included), and the body; the opaque (correlation id) is not covered, it only pairs an answer
with its request. msgpack packs the same scalars to the same bytes on both sides, so both sides
build identical strings from the decoded frame.

A server accepts a request when the access key names a user it knows, the signature verifies
with that user's secret, the timestamp lies within ``window_ms`` of its own clock (either way),
and the nonce was not seen before for that user (:class:`NonceCache`). The last two make a
captured request useless after the window and unrepeatable within it. The secret never travels;
a server that only sees signatures cannot recover it.

Pure code: no I/O and no clock (the time and the nonce prefix are inputs).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import itertools
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import msgpack

from protocol.remoting import FLAG_ONEWAY, Header, Scalar
from protocol.sealing import check_key

ACCESS_KEY: Final = "AccessKey"
TIMESTAMP: Final = "Timestamp"
NONCE: Final = "Nonce"
SIGNATURE: Final = "Signature"
AUTH_FIELDS: Final = (ACCESS_KEY, TIMESTAMP, NONCE, SIGNATURE)
VERIFIED_USER: Final = "verifiedUser"
"""The header field a server's request guard sets, once it verified a request, to the user it
was signed by (or its connection authenticated as): a handler that must know who asked (a
producer id's tokens, protocol/producer_token.py) reads it there. Whatever a client sent under
that name is overwritten; without authentication no guard runs and nothing may trust it."""

SIGN_VERSION: Final = "RMQ1-HMAC-SHA256"
MAX_NONCE_CHARS: Final = 64
MAX_ACCESS_KEY_CHARS: Final = 64
DEFAULT_WINDOW_MS: Final = 60_000
DEFAULT_MAX_NONCES_PER_USER: Final = 65_536

CLUSTER_ACCESS_KEY: Final = "rmq:cluster"
"""The access key of the cluster's own processes (brokers and controllers holding the cluster's
auth key). Its ':' is not allowed in usernames, so no user can be created under it."""

# Why a request is refused (the label of the refusal metrics).
UNSIGNED: Final = "unsigned"
MALFORMED: Final = "malformed"
UNKNOWN_USER: Final = "unknown_user"
BAD_SIGNATURE: Final = "bad_signature"
EXPIRED: Final = "expired"
REPLAYED: Final = "replayed"
DENIED: Final = "denied"
SESSION: Final = "session"
REASONS: Final = (
    UNSIGNED,
    MALFORMED,
    UNKNOWN_USER,
    BAD_SIGNATURE,
    EXPIRED,
    REPLAYED,
    DENIED,
    SESSION,
)

CHANNEL_BINDING: Final = "ChannelBinding"
"""The AUTHENTICATE request's header field: base64 of the TLS connection's ``tls-unique``
channel binding as the client sees it (covered by the signature like every header field)."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """An access key and its secret (the secret never appears in a repr)."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")


def cluster_credentials(auth_key: bytes) -> Credentials:
    """The credentials every process holding the cluster's auth key derives alike: the cluster's
    own traffic (registration, heartbeats, pushes, slave syncs) signs with them."""
    derived = hmac.digest(check_key(auth_key), b"rmq-cluster-credential-v1", "sha256")
    return Credentials(CLUSTER_ACCESS_KEY, base64.b64encode(derived).decode())


_PACKER = msgpack.Packer(use_bin_type=True)
_BLOCK: Final = 64  # SHA-256's block size, HMAC's key length
_IPAD: Final = bytes.maketrans(bytes(range(256)), bytes(b ^ 0x36 for b in range(256)))
_OPAD: Final = bytes.maketrans(bytes(range(256)), bytes(b ^ 0x5C for b in range(256)))


class SigningKey:
    """HMAC-SHA256 under one secret, with the key's two padded blocks hashed once (RFC 2104:
    HMAC(K, m) = H(K ^ opad || H(K ^ ipad || m))): each signature then costs copies of the two
    prepared hash states and hashes only the message, about a quarter of a one-shot
    ``hmac.digest`` (which derives the pads again on every call)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: str) -> None:
        key = secret.encode()
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(_IPAD))
        self._outer = hashlib.sha256(key.translate(_OPAD))

    def __repr__(self) -> str:
        return "SigningKey(...)"

    def mac(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def signature(self, message: bytes) -> bytes:
        """The Signature field's value for ``message``: base64 of the MAC (ASCII bytes)."""
        return binascii.b2a_base64(self.mac(message), newline=False)


@functools.lru_cache(maxsize=1024)
def signing_key(secret: str) -> SigningKey:
    """The prepared key of ``secret``, remembered: a server verifies the same few users'
    requests again and again."""
    return SigningKey(secret)


def string_to_sign(
    code: int, flags: int, header: Mapping[str, Scalar], body: bytes | None
) -> bytes:
    """The bytes the signature is computed over (see the module docstring); ``header`` is
    taken without its Signature field."""
    if SIGNATURE in header:
        unsigned = dict(header)
        del unsigned[SIGNATURE]
        fields = sorted(unsigned.items())
    else:
        fields = sorted(header.items())
    digest = None if body is None else hashlib.sha256(body).digest()
    packed: bytes = _PACKER.pack([SIGN_VERSION, code, bool(flags & FLAG_ONEWAY), fields, digest])
    return packed


class RequestSigner:
    """Signs the requests of one client with one set of credentials.

    Nonces are ``prefix`` (random, drawn once by the caller) and a counter, so they are unique
    without a random draw per request.
    """

    __slots__ = ("_counter", "_key", "_prefix", "credentials")

    def __init__(self, credentials: Credentials, prefix: str) -> None:
        if not prefix or len(prefix) > MAX_NONCE_CHARS - 16:
            raise ValueError(f"nonce prefix must be 1..{MAX_NONCE_CHARS - 16} characters")
        self.credentials = credentials
        self._key = SigningKey(credentials.secret_key)
        self._prefix = prefix
        self._counter = itertools.count(1)

    def sign(
        self,
        code: int,
        flags: int,
        header: Mapping[str, Scalar] | None,
        body: bytes | None,
        now_ms: int,
    ) -> Header:
        """``header`` with AccessKey, Timestamp, Nonce and Signature added (a new dict)."""
        signed: Header = dict(header) if header else {}
        for name in AUTH_FIELDS:
            signed.pop(name, None)
        signed[ACCESS_KEY] = self.credentials.access_key
        signed[TIMESTAMP] = now_ms
        signed[NONCE] = f"{self._prefix}{next(self._counter):x}"
        signed[SIGNATURE] = self._key.signature(string_to_sign(code, flags, signed, body)).decode()
        return signed


# Verification ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """``reason`` None: the request is ``username``'s. Otherwise one of :data:`REASONS` and a
    ``detail`` fit for the client (it never holds a secret or the expected signature)."""

    username: str | None
    reason: str | None
    detail: str

    @property
    def ok(self) -> bool:
        return self.reason is None


def _refused(reason: str, detail: str, username: str | None = None) -> Verdict:
    return Verdict(username, reason, detail)


@functools.lru_cache(maxsize=1024)
def _accepted(username: str) -> Verdict:
    """The (immutable) verdict accepting ``username``'s requests, made once per user: a frozen
    dataclass costs more to build than the rest of the nonce check."""
    return Verdict(username, None, "verified")


class _UserNonces:
    __slots__ = ("floor_ms", "order", "seen")

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.order: deque[tuple[int, str]] = deque()
        self.floor_ms = -(2**63)


class NonceCache:
    """The nonces each user signed within the window, to refuse a request seen before.

    An entry is kept until its timestamp is more than ``window_ms`` in the past (the window then
    refuses its replay anyway). A user may have at most ``max_per_user`` entries: when full, the
    oldest is forgotten and the user's floor rises to its timestamp, so from then on a request of
    that user signed at or before the floor is refused. Memory stays bounded; the cost is that a
    client whose clock lags another client of the same user by more than what the cache holds
    (``max_per_user`` requests' worth of time) is refused as a replay.
    """

    __slots__ = ("_max", "_users", "_window_ms")

    def __init__(
        self, window_ms: int = DEFAULT_WINDOW_MS, max_per_user: int = DEFAULT_MAX_NONCES_PER_USER
    ) -> None:
        if window_ms < 1 or max_per_user < 1:
            raise ValueError("window_ms and max_per_user must be positive")
        self._window_ms = window_ms
        self._max = max_per_user
        self._users: dict[str, _UserNonces] = {}

    def size(self, username: str) -> int:
        entry = self._users.get(username)
        return 0 if entry is None else len(entry.seen)

    def admit(self, username: str, nonce: str, timestamp_ms: int, now_ms: int) -> str | None:
        """Remember ``nonce``; None when it is new, else why it is refused (a replay)."""
        entry = self._users.get(username)
        if entry is None:
            entry = self._users[username] = _UserNonces()
        seen, order = entry.seen, entry.order
        horizon = now_ms - self._window_ms
        while order and order[0][0] < horizon:
            _, old = order.popleft()
            if seen.get(old, horizon) < horizon:
                del seen[old]
        if nonce in seen:
            return f"nonce {nonce!r} of {username} was already used: a replayed request"
        if timestamp_ms <= entry.floor_ms:
            return (
                f"request of {username} signed at {timestamp_ms} is not newer than the "
                f"{self._max} requests remembered for it (since {entry.floor_ms}): refused as a "
                "possible replay; check the client's clock"
            )
        while len(seen) >= self._max:
            ts, old = order.popleft()
            seen.pop(old, None)
            entry.floor_ms = max(entry.floor_ms, ts)
        seen[nonce] = timestamp_ms
        order.append((timestamp_ms, nonce))
        return None


def claimed_signer(header: Mapping[str, Scalar]) -> str | None:
    """The access key a request says it is signed with, not verified: None when it is unsigned
    or the field is not text."""
    access_key = header.get(ACCESS_KEY)
    return access_key if isinstance(access_key, str) else None


def verify(
    code: int,
    flags: int,
    header: Mapping[str, Scalar],
    body: bytes | None,
    *,
    secret_of: Callable[[str], str | None],
    now_ms: int,
    window_ms: int,
    nonces: NonceCache,
) -> Verdict:
    """Is this request signed by a known user, fresh, and not seen before?

    ``secret_of(access_key)`` gives the user's secret (None: unknown user). The nonce is
    remembered only once the signature verified, so forged requests cannot fill the cache.
    """
    access_key = header.get(ACCESS_KEY)
    if access_key is None:
        return _refused(UNSIGNED, "request is not signed (this server requires credentials)")
    sig = header.get(SIGNATURE)
    ts = header.get(TIMESTAMP)
    nonce = header.get(NONCE)
    if not isinstance(access_key, str) or not 0 < len(access_key) <= MAX_ACCESS_KEY_CHARS:
        return _refused(MALFORMED, f"{ACCESS_KEY} must be a string of 1..{MAX_ACCESS_KEY_CHARS}")
    if not isinstance(sig, str) or type(ts) is not int:
        return _refused(
            MALFORMED, f"a signed request carries {SIGNATURE} (str) and {TIMESTAMP} (int, ms)"
        )
    if not isinstance(nonce, str) or not 0 < len(nonce) <= MAX_NONCE_CHARS:
        return _refused(MALFORMED, f"{NONCE} must be a string of 1..{MAX_NONCE_CHARS}")
    secret = secret_of(access_key)
    if secret is None:
        return _refused(UNKNOWN_USER, f"unknown access key {access_key!r}")
    skew = ts - now_ms
    if abs(skew) > window_ms:
        return _refused(
            EXPIRED,
            f"request timestamp {ts} is {abs(skew)} ms {'ahead of' if skew > 0 else 'behind'} "
            f"the server's clock (allowed: {window_ms} ms); check the client's clock",
            access_key,
        )
    expected = signing_key(secret).signature(string_to_sign(code, flags, header, body))
    # compared as text: the one base64 spelling of the MAC, in constant time
    if not hmac.compare_digest(sig.encode("utf-8", "surrogatepass"), expected):
        if not _is_base64(sig):
            return _refused(BAD_SIGNATURE, f"{SIGNATURE} is not base64", access_key)
        return _refused(
            BAD_SIGNATURE,
            f"signature does not match the request for access key {access_key!r} "
            "(wrong secret key, or the request was altered)",
            access_key,
        )
    replay = nonces.admit(access_key, nonce, ts, now_ms)
    if replay is not None:
        return _refused(REPLAYED, replay, access_key)
    return _accepted(access_key)


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def channel_binding_field(binding: bytes) -> str:
    """The ChannelBinding field's value for a connection's ``tls-unique`` bytes."""
    return base64.b64encode(binding).decode()


def session_refusal(header: Mapping[str, Scalar], binding: bytes | None) -> str | None:
    """Why a verified AUTHENTICATE request may not open a session on its connection, or None.

    ``binding`` is the server's own ``tls-unique`` of the connection (None: not TLS). The
    client's field must name the same TLS connection: a signed AUTHENTICATE captured or relayed
    by a man in the middle (a client that does not check the server's certificate) names the
    client's connection to the middle, never the middle's connection to the server.
    """
    if binding is None:
        return "sessions need TLS; over plain TCP every request is signed"
    value = header.get(CHANNEL_BINDING)
    if not isinstance(value, str):
        return f"{CHANNEL_BINDING} (base64 of the connection's tls-unique) is missing"
    expected = channel_binding_field(binding).encode()
    if not hmac.compare_digest(value.encode("utf-8", "surrogatepass"), expected):
        return (
            f"{CHANNEL_BINDING} does not name this TLS connection (a TLS-terminating proxy "
            "between client and server, or a relayed request)"
        )
    return None


def strip_auth_fields(header: Header, username: str) -> None:
    """Remove the signature fields (in place) once verified: handlers never see them; the
    verified ``username`` is left in :data:`VERIFIED_USER` instead."""
    for name in AUTH_FIELDS:
        header.pop(name, None)
    header[VERIFIED_USER] = username
