"""`attnmt serve`: translations over HTTP, batched across requests, with limits and the attention explorer."""

from .app import create_app
from .runner import serve

__all__ = ["create_app", "serve"]
