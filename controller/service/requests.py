"""Answers shared by every handler of the controller service.

Handlers decode their requests with the typed codecs of :mod:`protocol.controller_requests`. A
handler raises :class:`Refused` anywhere to answer at once with a code and a remark;
:func:`guarded` turns that, a request the codec refused (:class:`InvalidRequest`, with its code)
and a stopping driver into the response and counts every answer in
``rmq_controller_requests_total``. A missing or mistyped header field (a plain ``FieldError``) is
answered BAD_REQUEST by the remoting server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from controller.metadata import Decision
from controller.metrics import ControllerMetrics
from controller.raft_driver import DriverStopped
from protocol.codes import ControllerCode, RequestCode, ResponseCode, code_name
from protocol.controller_requests.base import InvalidRequest
from protocol.refusal import RequestRefused
from protocol.remoting import Frame, Header, response
from remoting.server import Connection, error_response

AsyncHandler = Callable[[Connection, Frame], Awaitable[Frame]]
R = TypeVar("R")


class Refused(RequestRefused):
    """Answer the request with ``code`` now (raised anywhere inside a handler)."""

    def __init__(self, code: int, remark: str, header: Header | None = None) -> None:
        super().__init__(code, remark)
        self.header = header or {}


def refuse(decision: Decision[Any]) -> Refused:
    """The refusal that answers a decision that is not SUCCESS."""
    return Refused(decision.code, decision.remark or code_name(decision.code))


def answer_of(decision: Decision[R]) -> R:
    """The response of a SUCCESS decision; else (refused, or no response) its refusal, raised."""
    if not decision.ok or decision.response is None:
        raise refuse(decision)
    return decision.response


def refusal(req: Frame, refused: Refused) -> Frame:
    return response(req, refused.code, {"remark": refused.remark, **refused.header})


def count(metrics: ControllerMetrics | None, req: Frame, resp: Frame) -> None:
    """One answer in ``rmq_controller_requests_total{request, code}``."""
    if metrics is None:
        return
    key = (req.code, resp.code)
    child = metrics.requests_by_codes.get(key)
    if child is None:  # the names and the label lookup once per pair of codes
        try:
            request = RequestCode(req.code).name
        except ValueError:
            try:
                request = ControllerCode(req.code).name
            except ValueError:
                request = str(req.code)
        child = metrics.requests.labels(request=request, code=code_name(resp.code))
        metrics.requests_by_codes[key] = child
    child.inc()


def guarded(handler: AsyncHandler, metrics: ControllerMetrics | None) -> AsyncHandler:
    """``handler`` with its refusals answered and every answer counted."""

    async def run(conn: Connection, req: Frame) -> Frame:
        try:
            resp = await handler(conn, req)
        except Refused as refused:
            resp = refusal(req, refused)
        except InvalidRequest as exc:
            resp = refusal(req, Refused(exc.code, str(exc)))
        except DriverStopped:
            resp = error_response(req, ResponseCode.SERVICE_NOT_AVAILABLE, "controller is stopping")
        count(metrics, req, resp)
        return resp

    return run
