"""The official RocketMQ 5 clients' request signature (gRPC metadata), verified: pure code.

Every gRPC call of the official clients carries, among its metadata::

    x-mq-date-time: 20261124T153000Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secret key, the x-mq-date-time value)>

(one line; the clients write exactly ``", "`` between the three parts). Only the date-time is
signed, to the second: a captured call can be replayed with the same metadata, so this scheme
resists replay no better than the time window the server allows (and the Python client writes
its *local* time followed by ``Z``, so that window is only meaningful where clients run in UTC).
TLS is what protects these calls on the wire.

:func:`verify_authorization` checks the header against the user's secret (and, when asked, the
date-time against the server's clock). The time is an input: no clock, no I/O.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from protocol.request_auth import (
    BAD_SIGNATURE,
    EXPIRED,
    MALFORMED,
    UNKNOWN_USER,
    UNSIGNED,
    Verdict,
)

ALGORITHM: Final = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER: Final = "x-mq-date-time"
AUTHORIZATION_HEADER: Final = "authorization"
DATE_TIME_FORMAT: Final = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> Authorization:
    """Split ``MQv2-HMAC-SHA1 Credential=..., SignedHeaders=..., Signature=...``; ValueError
    naming what is wrong. An empty Credential gives the access key ""."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise ValueError(f"authorization must use {ALGORITHM}, not {algorithm!r}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, text = item.strip().partition("=")
        if not sep:
            raise ValueError(f"authorization part {item.strip()!r} is not name=value")
        parts[name] = text.strip()
    # An empty Credential is not malformed: it is what the clients send without credentials.
    missing = ["Credential"] if "Credential" not in parts else []
    missing += [p for p in ("SignedHeaders", "Signature") if not parts.get(p)]
    if missing:
        raise ValueError(f"authorization lacks {', '.join(missing)}")
    # Credential may carry a scope after a '/' (other clients); the access key comes first.
    access_key = parts["Credential"].split("/", 1)[0]
    signed = tuple(h.strip().lower() for h in parts["SignedHeaders"].split(";") if h.strip())
    return Authorization(access_key, signed, parts["Signature"].lower())


def sign_date_time(secret: str, date_time: str) -> str:
    """What the official clients put in Signature for ``date_time``."""
    return hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def date_time_ms(date_time: str) -> int:
    """``20261124T153000Z`` as epoch ms (read as UTC); ValueError when malformed."""
    return calendar.timegm(datetime.strptime(date_time, DATE_TIME_FORMAT).timetuple()) * 1000


def verify_authorization(
    authorization: str | None,
    date_time: str | None,
    *,
    secret_of: Callable[[str], str | None],
    now_ms: int,
    window_ms: int | None,
) -> Verdict:
    """Verify one call's ``authorization`` and ``x-mq-date-time`` metadata values.

    ``secret_of(access_key)`` gives the user's secret (None: unknown). With ``window_ms`` set,
    a date-time further than that from ``now_ms`` (either way) is refused as EXPIRED; None
    skips the check (clients writing local time as UTC). Reasons as :mod:`protocol.request_auth`.
    """
    if not authorization:
        return Verdict(None, UNSIGNED, "call carries no authorization (credentials required)")
    try:
        auth = parse_authorization(authorization)
    except ValueError as exc:
        return Verdict(None, MALFORMED, str(exc))
    if not auth.access_key:
        return Verdict(None, UNSIGNED, "call signed without an access key (credentials required)")
    if DATE_TIME_HEADER not in auth.signed_headers:
        return Verdict(None, MALFORMED, f"authorization must sign {DATE_TIME_HEADER}")
    if not date_time:
        return Verdict(None, MALFORMED, f"call carries no {DATE_TIME_HEADER}")
    try:
        signed_at = date_time_ms(date_time)
    except ValueError:
        return Verdict(None, MALFORMED, f"{DATE_TIME_HEADER} {date_time!r} is not yyyyMMddTHHmmssZ")
    secret = secret_of(auth.access_key)
    if secret is None:
        return Verdict(None, UNKNOWN_USER, f"unknown access key {auth.access_key!r}")
    if window_ms is not None and abs(signed_at - now_ms) > window_ms:
        return Verdict(
            auth.access_key,
            EXPIRED,
            f"{DATE_TIME_HEADER} {date_time} is more than {window_ms} ms from the server's clock",
        )
    if not hmac.compare_digest(sign_date_time(secret, date_time), auth.signature):
        return Verdict(
            auth.access_key,
            BAD_SIGNATURE,
            f"signature does not match for access key {auth.access_key!r} (wrong secret key?)",
        )
    return Verdict(auth.access_key, None, "verified")
