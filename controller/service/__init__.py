"""The controller service: every request of docs/protocol.md "Controller requests"."""

from controller.service.composition import ControllerService

__all__ = ["ControllerService"]
