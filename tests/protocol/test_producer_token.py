"""Producer tokens (protocol/producer_token.py): a send token names its id, epoch and user, an
owner token its id and user; the broker's check refuses every other combination, and the SDK
keeps the owner token on the id file's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.errors import ClientError
from client.producer_identity import read_id_file, read_identity, write_id_file
from protocol.controller_requests.producers import GetProducerId, ProducerIdAnswer
from protocol.fields import FieldError
from protocol.producer_token import (
    OWNER_FIELD,
    TOKEN_BYTES,
    TOKEN_FIELD,
    SendTokens,
    owner_refusal,
    owner_token,
    send_token,
    token_key,
)

KEY = token_key(b"k" * 32)


def test_a_send_token_belongs_to_one_id_epoch_and_user() -> None:
    token = send_token(KEY, 7, 3, "alice")
    assert len(token) == TOKEN_BYTES
    others = {
        send_token(KEY, 8, 3, "alice"),
        send_token(KEY, 7, 4, "alice"),
        send_token(KEY, 7, 3, "alicf"),
        send_token(token_key(b"j" * 32), 7, 3, "alice"),
        owner_token(KEY, 7, "alice"),
    }
    assert token not in others and len(others) == 5
    # the fields are separated: id 1, epoch 23 is not id 12, epoch 3
    assert send_token(KEY, 1, 23, "u") != send_token(KEY, 12, 3, "u")


def test_the_brokers_check_takes_the_users_token_only() -> None:
    tokens = SendTokens(KEY)
    good = send_token(KEY, 7, 3, "alice")
    assert tokens.refusal(7, 3, "alice", good) is None
    assert tokens.refusal(7, 3, "alice", good) is None  # again, from its cache
    why = tokens.refusal(7, 3, "mallory", good)
    assert why is not None and "to user mallory" in why and "not the one" in why
    why = tokens.refusal(7, 4, "alice", good)
    assert why is not None and "epoch 4" in why
    why = tokens.refusal(7, 3, "alice", None)
    assert why is not None and f"no {TOKEN_FIELD} was sent" in why
    assert tokens.refusal(7, 3, "alice", "not bytes") is not None
    assert tokens.refusal(7, 3, None, good) == "the request names no verified user"


def test_the_brokers_cache_is_bounded_and_still_right_after_it_is_cleared() -> None:
    tokens = SendTokens(KEY)
    for pid in range(5000):
        assert tokens.refusal(pid, 0, "u", send_token(KEY, pid, 0, "u")) is None
    assert len(tokens._expected) <= 4096
    assert tokens.refusal(1, 0, "u", send_token(KEY, 1, 0, "u")) is None
    assert tokens.refusal(1, 0, "u", send_token(KEY, 2, 0, "u")) is not None


def test_an_id_is_taken_up_only_with_its_users_owner_token() -> None:
    mine = owner_token(KEY, 9, "alice")
    assert owner_refusal(KEY, 9, "alice", mine) is None
    for user, given, why in (
        ("mallory", mine, "its ownerToken is not this user's"),
        ("alice", None, "no ownerToken was sent"),
        ("alice", owner_token(KEY, 10, "alice"), "its ownerToken is not this user's"),
    ):
        refusal = owner_refusal(KEY, 9, user, given)
        assert refusal is not None and why in refusal and f"user {user}" in refusal


def test_the_tokens_travel_in_the_producer_id_request_and_answer() -> None:
    ask = GetProducerId(producer_id=9, owner_token=b"o" * TOKEN_BYTES)
    assert GetProducerId.parse(*ask.encode()) == ask
    answer = ProducerIdAnswer(
        producer_id=9, epoch=2, token=b"t" * TOKEN_BYTES, owner_token=b"o" * TOKEN_BYTES
    )
    header, body = answer.encode()
    assert header[TOKEN_FIELD] == b"t" * TOKEN_BYTES and header[OWNER_FIELD] == b"o" * 16
    assert ProducerIdAnswer.parse(header, body) == answer
    # without authentication: no tokens, the fields absent
    assert ProducerIdAnswer.parse(*ProducerIdAnswer(producer_id=9, epoch=2).encode()).token is None
    with pytest.raises(FieldError, match="must be 16 bytes"):
        GetProducerId.parse({"producerId": 9, OWNER_FIELD: b"short"})
    with pytest.raises(FieldError, match="must be 16 bytes"):
        ProducerIdAnswer.parse({"producerId": 9, "producerEpoch": 0, TOKEN_FIELD: "text"})


def test_the_id_file_keeps_the_owner_token_on_the_ids_line(tmp_path: Path) -> None:
    path = tmp_path / "p.id"
    assert read_identity(path) is None
    write_id_file(path, 12)
    assert path.read_text() == "12\n"
    assert read_identity(path) == (12, None)
    token = bytes(range(16))
    write_id_file(path, 12, token)
    assert path.read_text() == f"12 {token.hex()}\n"
    assert read_identity(path) == (12, token)
    assert read_id_file(path) == 12
    path.write_text("12 abcd\n")
    with pytest.raises(ClientError, match="not an owner token"):
        read_identity(path)
    path.write_text("x12\n")
    with pytest.raises(ClientError, match="does not hold a producer id"):
        read_identity(path)


def test_during_an_upgrade_a_missing_token_may_be_let_in_but_a_wrong_one_never() -> None:
    tokens = SendTokens(KEY, required=False)
    assert tokens.refusal(7, 3, "alice", None) is None  # an older SDK's send
    assert tokens.refusal(7, 3, "alice", send_token(KEY, 7, 3, "alice")) is None
    assert tokens.refusal(7, 3, "mallory", send_token(KEY, 7, 3, "alice")) is not None
    assert owner_refusal(KEY, 9, "alice", None, required=False) is None
    assert owner_refusal(KEY, 9, "mallory", owner_token(KEY, 9, "alice"), required=False)
