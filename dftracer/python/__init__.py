"""The pydftracer-compatible API: ``from dftracer.python import dftracer``."""

from dftracer._core import dftracer

__all__ = ["dftracer"]
