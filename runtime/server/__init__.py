"""The ZeroMQ policy server: ROUTER sockets, a bounded queue and one inference worker thread."""

from runtime.server.config import CurveConfig, ServerConfig
from runtime.server.server import PolicyServer

__all__ = ["CurveConfig", "PolicyServer", "ServerConfig"]
