"""rtr-serve: the router-facing half (server, CLI); `rtr_server.protocol` is the sans-IO core."""

__version__ = "0.1.0"
