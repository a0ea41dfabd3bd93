"""``rtr-serve dump URL``: read another cache as a router once and print what it holds.

Exit status: 0 after the cache's End of Data; 1 with one line on stderr when the cache cannot be
read (connect, timeout, Error Report, No Data, Cache Reset); 2 for bad arguments, before any
network activity.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import anyio

from rtr_server.dump_format import iter_csv, iter_json
from upstream.router_fetch import CacheAddress, FetchError, FetchResult, fetch, parse_cache_url

__all__ = ["build_dump_parser", "main", "parse_serial_query"]


def parse_serial_query(text: str) -> tuple[int, int]:
    """``SESSION:SERIAL`` → the pair; raises ValueError when either is out of range."""
    session, sep, serial = text.partition(":")
    try:
        pair = int(session), int(serial)
    except ValueError:
        pair = (-1, -1)
    if not sep or not 0 <= pair[0] <= 0xFFFF or not 0 <= pair[1] <= 0xFFFFFFFF:
        raise ValueError(f"--serial-query {text!r}: expected SESSION:SERIAL (0..65535:0..2^32-1)")
    return pair


def build_dump_parser() -> argparse.ArgumentParser:
    """The ``rtr-serve dump`` options."""
    parser = argparse.ArgumentParser(
        prog="rtr-serve dump",
        description="Connect to an RTR cache as a router, read its data up to End of Data "
        "and print it (like StayRTR's rtrdump, with our own RTR client).",
    )
    parser.add_argument(
        "url",
        help="rtr://HOST[:PORT] (port 323), rtrs://HOST[:PORT] (TLS, port 324) or "
        "ssh://[USER@]HOST[:PORT] (subsystem rpki-rtr, port 22)",
    )
    parser.add_argument(
        "--version",
        type=int,
        choices=(0, 1, 2),
        default=None,
        help="protocol version to speak (default: start at 2 and follow the cache down)",
    )
    parser.add_argument("--format", choices=("json", "csv"), default="json", help="output format")
    parser.add_argument(
        "--serial-query",
        metavar="SESSION:SERIAL",
        help="ask for the changes since SERIAL of SESSION (an incremental answer) instead of "
        "the whole table; asked at --version (default 2), no negotiation",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds for the whole exchange, connect to End of Data (default 60)",
    )
    parser.add_argument("--tls", action="store_true", help="speak TLS (implied by rtrs://)")
    parser.add_argument("--ca-file", help="CA bundle to verify the cache's TLS certificate")
    parser.add_argument("--cert", help="TLS: the router certificate to present (with --key)")
    parser.add_argument("--key", help="TLS: the key of --cert")
    parser.add_argument(
        "--ssh-key", help="SSH: the private key to log in with (default: agent, ~/.ssh keys)"
    )
    parser.add_argument(
        "--ssh-known-hosts",
        help="SSH: known_hosts file with the cache's host key (default ~/.ssh/known_hosts; "
        "an unknown host key is refused)",
    )
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")
    return parser


def _metadata(address: CacheAddress, result: FetchResult) -> dict[str, Any]:
    timers = result.timers
    meta: dict[str, Any] = {
        "cache": str(address),
        "version": result.version,
        "session_id": result.session_id,
        "serial": result.serial,
        "refresh": None if timers is None else timers.refresh,
        "retry": None if timers is None else timers.retry,
        "expire": None if timers is None else timers.expire,
    }
    if result.downgrades:
        meta["downgrades"] = result.downgrades
    return meta


def render(
    address: CacheAddress, result: FetchResult, fmt: str, serial: str | None
) -> Iterator[str]:
    """The text printed for ``result``, in pieces."""
    changes = [(c.announce, c.record) for c in result.changes]
    if fmt == "csv":
        return iter_csv(result.snapshot, changes)
    meta = _metadata(address, result)
    if serial is not None:
        meta["serial_query"] = serial
    return iter_json(meta, result.snapshot, changes)


def main(argv: Sequence[str]) -> int:
    """Run ``rtr-serve dump``; returns the exit status."""
    parser = build_dump_parser()
    args = parser.parse_args(argv)
    try:
        address = parse_cache_url(args.url, tls=args.tls)
        query = None if args.serial_query is None else parse_serial_query(args.serial_query)
    except ValueError as exc:
        parser.error(str(exc))
    if not args.timeout > 0:
        parser.error("--timeout must be positive")
    if (args.cert is None) != (args.key is None):
        parser.error("--cert and --key go together")
    if args.cert is not None and not address.tls:
        parser.error("--cert needs TLS (rtrs:// or --tls)")
    if address.ssh_user is not None and args.tls:
        parser.error("--tls and ssh:// do not go together")
    if (args.ssh_key or args.ssh_known_hosts) and address.ssh_user is None:
        parser.error("--ssh-key and --ssh-known-hosts need an ssh:// URL")
    version = 2 if args.version is None else args.version
    try:
        result = anyio.run(
            lambda: fetch(
                address,
                version=version,
                negotiate=args.version is None,
                serial_query=query,
                within=args.timeout,
                ca_file=args.ca_file,
                client_cert=None if args.cert is None else (args.cert, args.key),
                ssh_key=args.ssh_key,
                ssh_known_hosts=args.ssh_known_hosts,
            )
        )
    except FetchError as exc:
        sys.stderr.write(f"rtr-serve dump: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    pieces = render(address, result, args.format, args.serial_query)
    try:
        if args.output is None:
            sys.stdout.writelines(pieces)
        else:
            with open(args.output, "w", encoding="utf-8") as out:  # noqa: PTH123
                out.writelines(pieces)
    except BrokenPipeError:
        # The reader went away (``| head``): quietly, like other command-line tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        sys.stderr.write(f"rtr-serve dump: cannot write the output: {exc}\n")
        return 1
    for line in result.downgrades:
        sys.stderr.write(f"rtr-serve dump: {line}\n")
    return 0
