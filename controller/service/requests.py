"""Request decoding and answers shared by every handler of the controller service.

A handler raises :class:`Refused` anywhere to answer at once with a code and a remark;
:func:`guarded` turns that (and a stopping driver) into the response and counts every answer
in ``rmq_controller_requests_total``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgpack

from controller.metadata import Decision
from controller.metrics import ControllerMetrics
from controller.raft_driver import DriverStopped
from protocol.codes import ControllerCode, RequestCode, ResponseCode, code_name
from protocol.fields import FieldError, opt_int
from protocol.remoting import Frame, Header, Scalar, response
from remoting.server import Connection, error_response

AsyncHandler = Callable[[Connection, Frame], Awaitable[Frame]]


class Refused(Exception):
    """Answer the request with ``code`` now (raised anywhere inside a handler)."""

    def __init__(self, code: int, remark: str, header: Header | None = None) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
        self.header = header or {}


def refuse(decision: Decision[Any]) -> Refused:
    """The refusal that answers a decision that is not SUCCESS."""
    return Refused(decision.code, decision.remark or code_name(decision.code))


def refusal(req: Frame, refused: Refused) -> Frame:
    return response(req, refused.code, {"remark": refused.remark, **refused.header})


def opt_bool(header: Mapping[str, Scalar], name: str) -> bool:
    value = header.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FieldError(f"header field {name!r} must be true or false")
    return value


def unpack_body(req: Frame) -> dict[str, Any]:
    if not req.body:
        return {}
    try:
        doc = msgpack.unpackb(req.body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise Refused(
            ResponseCode.CONTROLLER_INVALID_REQUEST, f"undecodable body: {type(exc).__name__}"
        ) from None
    if not isinstance(doc, dict):
        raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, "body must be a map")
    return doc


def id_list(value: Any, what: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, f"{what} must be a list of ints")
    return frozenset(value)


def bounded(header: Mapping[str, Scalar], name: str, lo: int, hi: int) -> int:
    """An optional int header field (0 when absent) that must lie in [lo, hi]."""
    value = opt_int(header, name, 0)
    if not lo <= value <= hi:
        raise Refused(
            ResponseCode.CONTROLLER_INVALID_REQUEST, f"{name} must be in [{lo}, {hi}], not {value}"
        )
    return value


def count(metrics: ControllerMetrics | None, req: Frame, resp: Frame) -> None:
    """One answer in ``rmq_controller_requests_total{request, code}``."""
    if metrics is not None:
        try:
            request = RequestCode(req.code).name
        except ValueError:
            try:
                request = ControllerCode(req.code).name
            except ValueError:
                request = str(req.code)
        metrics.requests.labels(request=request, code=code_name(resp.code)).inc()


def guarded(handler: AsyncHandler, metrics: ControllerMetrics | None) -> AsyncHandler:
    """``handler`` with its refusals answered and every answer counted."""

    async def run(conn: Connection, req: Frame) -> Frame:
        try:
            resp = await handler(conn, req)
        except Refused as refused:
            resp = refusal(req, refused)
        except DriverStopped:
            resp = error_response(req, ResponseCode.SERVICE_NOT_AVAILABLE, "controller is stopping")
        count(metrics, req, resp)
        return resp

    return run
