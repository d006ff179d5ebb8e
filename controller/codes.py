"""Request codes the controller serves beyond protocol/codes.py.

GET_CONTROLLER_CONFIG reuses RocketMQ's number (1010); the rest are our own (5000 and up, see
DESIGN.md section 4). The Raft peer messages travel as oneway RAFT_MESSAGE frames whose body is
one :mod:`protocol.raft` message.
"""

from __future__ import annotations

from enum import IntEnum


class ControllerCode(IntEnum):
    GET_CONTROLLER_CONFIG = 1010
    RAFT_MESSAGE = 5100
    ADD_CONTROLLER = 5101
    REMOVE_CONTROLLER = 5102
    TRANSFER_CONTROLLER_LEADER = 5103
