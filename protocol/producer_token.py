"""Producer tokens: a producer id belongs to the user who took it (authentication on;
docs/idempotence.md).

A broker fences an idempotent producer by its id and epoch, whatever the topic. Without a bond
between the id and its user, anyone allowed to send anywhere could send with another
producer's id at a later epoch and fence it. With authentication on, the controllers answer
CONTROLLER_GET_PRODUCER_ID with two tokens, each the first :data:`TOKEN_BYTES` bytes of an
HMAC-SHA256 under a key derived from the cluster's auth key (:func:`token_key`), which only
the controllers and the brokers hold:

- the **send token** of (producer id, epoch, user) (:func:`send_token`): every sequenced send
  carries it in the header field :data:`TOKEN_FIELD`, and a broker stores a sequenced send only
  when the token is the one of its producer id and epoch for the user who signed the request;
- the **owner token** of (producer id, user) (:func:`owner_token`): a producer that takes its
  id up again at a new epoch (``producer_id_file``) sends it in :data:`OWNER_FIELD`, and the
  controllers issue the new epoch only when it is the asking user's.

Both are checked by computing them again: nothing is stored for them, on any side.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

__all__ = [
    "OWNER_FIELD",
    "TOKEN_BYTES",
    "TOKEN_FIELD",
    "SendTokens",
    "owner_refusal",
    "owner_token",
    "send_token",
    "token_key",
    "token_of",
]

TOKEN_FIELD: Final = "producerToken"
"""The header field of a sequenced send (and of the controllers' answer): the send token."""
OWNER_FIELD: Final = "ownerToken"
"""The header field of a take-up request (and of the controllers' answer): the owner token."""
TOKEN_BYTES: Final = 16

_KEY_LABEL: Final = b"rmq producer tokens v1"
_MAX_CACHED: Final = 4096


def token_key(auth_key: bytes) -> bytes:
    """The tokens' key, derived from the cluster's auth key (its own label: a token is never
    a signature or a sealed secret of anything else)."""
    return hmac.new(auth_key, _KEY_LABEL, hashlib.sha256).digest()


def send_token(key: bytes, producer_id: int, epoch: int, username: str) -> bytes:
    """The token ``username``'s sends with ``producer_id`` at ``epoch`` carry."""
    msg = b"send\x00%d\x00%d\x00%s" % (producer_id, epoch, username.encode("utf-8"))
    return hmac.new(key, msg, hashlib.sha256).digest()[:TOKEN_BYTES]


def owner_token(key: bytes, producer_id: int, username: str) -> bytes:
    """The token that shows ``producer_id`` was first issued to ``username``."""
    msg = b"owner\x00%d\x00%s" % (producer_id, username.encode("utf-8"))
    return hmac.new(key, msg, hashlib.sha256).digest()[:TOKEN_BYTES]


def token_of(header: Mapping[str, object], name: str) -> bytes | None:
    """The token in header field ``name``: None when absent; a :class:`ValueError` when it is
    not :data:`TOKEN_BYTES` bytes."""
    value = header.get(name)
    if value is None:
        return None
    if type(value) is not bytes or len(value) != TOKEN_BYTES:
        raise ValueError(f"header field {name!r} must be {TOKEN_BYTES} bytes")
    return value


def owner_refusal(
    key: bytes, producer_id: int, username: str, given: bytes | None, required: bool = True
) -> str | None:
    """Why ``username`` may not take up ``producer_id`` with owner token ``given`` (None: it
    may). Not ``required``: a take-up without a token is let in (an older SDK's, during an
    upgrade); a token sent is checked all the same."""
    if given is None and not required:
        return None
    if given is not None and hmac.compare_digest(given, owner_token(key, producer_id, username)):
        return None
    why = "no ownerToken was sent" if given is None else "its ownerToken is not this user's"
    return (
        f"producer id {producer_id} was not issued to user {username} ({why}): a producer "
        "takes up only an id it took itself; remove its producer_id_file to take a new id"
    )


class SendTokens:
    """A broker's check of sequenced sends' tokens, the expected token of recent (producer
    id, epoch, user) kept (a producer sends many times with one)."""

    __slots__ = ("_expected", "_key", "required")

    def __init__(self, key: bytes, required: bool = True) -> None:
        self._key = key
        self.required = required
        """False: a send without a token is let in (from an older SDK, or with a token from
        older controllers, during an upgrade); a token sent is checked all the same."""
        self._expected: dict[tuple[int, int, str], bytes] = {}

    def refusal(self, producer_id: int, epoch: int, username: object, given: object) -> str | None:
        """Why a send with ``producer_id`` at ``epoch`` signed by ``username``, carrying the
        token ``given``, may not be stored (None: it may)."""
        if given is None and not self.required:
            return None
        if type(username) is not str:
            return "the request names no verified user"
        k = (producer_id, epoch, username)
        expected = self._expected.get(k)
        if expected is None:
            expected = send_token(self._key, producer_id, epoch, username)
            if len(self._expected) >= _MAX_CACHED:
                self._expected.clear()
            self._expected[k] = expected
        if type(given) is bytes and hmac.compare_digest(given, expected):
            return None
        why = (
            f"no {TOKEN_FIELD} was sent"
            if given is None
            else f"its {TOKEN_FIELD} is not the one the controllers gave this user"
        )
        return (
            f"producer id {producer_id} epoch {epoch} was not issued by the controllers to user "
            f"{username} ({why}): only the user that took a producer id sends with it"
        )
