"""Sans-IO RTR protocol core (v0/v1/v2): PDUs, framing, the server session state machine, encoders."""
