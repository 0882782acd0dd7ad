"""The Faust worker: app factory and the capabilities plugged into it."""

from app.worker.factory import create_app

__all__ = ["create_app"]
