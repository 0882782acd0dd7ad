"""Errors of the embedded stack."""

from __future__ import annotations

from app.errors import ConfigError, ServiceUnavailable

__all__ = ["MissingTool", "PortHeldByOther", "ServiceDidNotStart", "ServiceUnreachable"]


class PortHeldByOther(ConfigError):
    """A service port is taken by a program that is not the expected service."""


class MissingTool(ConfigError):
    """A program the stack needs (node, java) is not installed."""


class ServiceDidNotStart(ServiceUnavailable):
    """A service hubstream started exited or did not answer in time."""


class ServiceUnreachable(ServiceUnavailable):
    """A configured external service does not answer."""
