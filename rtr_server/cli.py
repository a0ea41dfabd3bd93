"""The ``rtr-serve`` command line: arguments to settings to a running server."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rtr_server import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rtr-serve``."""
    parser = argparse.ArgumentParser(
        prog="rtr-serve",
        description="RPKI-to-Router (RTR) cache server for RFC 6810, RFC 8210 and 8210bis.",
    )
    parser.add_argument("--version", action="version", version=f"rtr-serve {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rtr-serve`` console script."""
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help(sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
