"""A request refused with a response code and a remark: the base of the refusals the daemons'
services and processors raise and their fronts answer with. Each keeps a class of its own (a
handler catches the ones it answers, and no other)."""

from __future__ import annotations

__all__ = ["RequestRefused"]


class RequestRefused(Exception):
    """The response code and the one-line remark to answer with."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
