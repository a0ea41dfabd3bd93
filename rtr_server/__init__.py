"""rtr-serve: the router side (server, connection, CLI, HTTP API); RTR core: `rtr_protocol`."""

__version__ = "0.1.0"
