"""The ``rtr-serve`` argument spec: every option, its check and its help text (no I/O).

`build_parser` is the one source of the options: the command line, the TOML file (merged in
`rtr_server.cli_config`) and ``--help`` all read it. Values are checked as they are parsed, so
a bad one exits 2 with one line before any file or network is touched.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from persistence.location import StateLocation, parse_state_location
from rtr_protocol import MAX_VERSION
from rtr_server import __version__
from rtr_server.access import Network, parse_network
from rtr_server.cli_ssh import add_ssh_options
from rtr_server.http.settings import DEFAULT_STALE_AFTER
from rtr_server.logs import LOG_FORMATS, LOG_LEVELS
from rtr_server.settings import (
    ShutdownNotice,
)

__all__ = ["OptionParser", "build_check_config_parser", "build_parser"]

DESCRIPTION = """\
RPKI-to-Router (RTR) cache server. Reads validated RPKI payload (VRPs, ASPAs, BGPsec router
keys) from JSON exports of rpki-client, Routinator or StayRTR -- files, http(s):// URLs -- or
from another RTR cache (rtr://), and serves it to routers over RTR version 0 (RFC 6810),
1 (RFC 8210) and 2 (draft-ietf-sidrops-8210bis, with ASPA).

Several --source files are merged (union); a configuration file (--config) adds prioritised
groups with failover. A source that does not exist yet is waited for; routers get "No Data
Available" until the first data is loaded. An invalid update is rejected with the reason and
the previous data keeps serving.

subcommands:
  rtr-serve check-config FILE   validate a configuration file without network activity
                                (see rtr-serve check-config --help)
  rtr-serve state export|import write a state file's exchange document, or import one
                                into a new state file (see rtr-serve state --help)
  rtr-serve dump URL            read an RTR cache as a router once and print its data
                                (JSON or CSV; see rtr-serve dump --help)
  rtr-serve compare A B         compare two caches or exports; --watch serves metrics
                                (see rtr-serve compare --help)
"""

EPILOG = """\
All durations are in seconds. Every option may also be set in the [server] table of the --config
file, by its long name with "_" for "-" (e.g. poll_interval = 30); the command line wins.

signals:
  SIGTERM, SIGINT  stop in order: take no new data from the sources; with --state, commit the
                   last published state (waiting at most --flush-timeout seconds; routers are
                   served meanwhile) and close the state file; then close every router session
                   (v2 routers are told Cache Restart, or Cache Shutdown with --shutdown-notice
                   shutdown). One log line says whether the state was persisted. A second
                   SIGTERM or SIGINT stops waiting for the commit.
  SIGHUP           reload the --config file: sources and groups are applied at once (sources
                   unchanged keep their data), so are log_level and log_format; options that
                   cannot change while running (listen addresses, timers, limits, ...) are
                   named in the log as needing a restart and keep their values. A file that
                   does not load is logged with the reason and nothing changes. Without
                   --config, SIGHUP only logs that there is nothing to reload.
  SIGUSR2          restart without losing routers: re-execute the same command in the same
                   process, handing over the listening sockets and every idle plain-TCP router
                   connection; with the same data the session ids and serial go on and
                   routers keep their data, else they get Cache Reset and the table under
                   new ids. --state is closed as at a stop first; TLS and SSH sessions are
                   closed. Under systemd: systemctl kill -s USR2 rtr-serve.

logging:
  One line per event on standard error: router session open and close (peer, version,
  session id, reason, bytes sent and received, duration), every publish (serial, counts,
  delta size, duration), every source state change (old -> new, reason, error class) and
  every reload. --log-format json writes one JSON object per line with ts (RFC 3339, UTC),
  level, logger, msg and the event's fields (event, peer, serial, ...).

exit status:
  0  stopped by SIGTERM or SIGINT (with --state: the last published state is persisted)
  1  cannot serve (e.g. a listen address is in use or needs privileges: port 323 needs
     CAP_NET_BIND_SERVICE), or, with --state, stopped without the last published state
     persisted (flush timeout, a second signal, a storage error): the file keeps its last
     complete commit
  2  bad arguments or configuration file (one line on standard error says what is wrong)

examples:
  rtr-serve --source /var/lib/rpki-client/json --listen 127.0.0.1:8323
  rtr-serve --source a.json --source b.json.bz2 --listen [::]:323 --listen 0.0.0.0:323
  rtr-serve --source https://validator.example.net/json --poll-interval 30
  rtr-serve --source old-export.json.bz2 --reference-time 2025-07-20T09:31:33Z
  rtr-serve --source a.json --listen-tls [::]:324 --tls-cert server.pem --tls-key server-key.pem \
            --tls-client-ca ca.pem --allow 192.0.2.0/24
  rtr-serve gen-cert DIR --router-ip 192.0.2.10   (a lab CA, server and router certificates)
  rtr-serve check-config FILE                     (validate a configuration file)
  rtr-serve --config /etc/rtr-serve/rtr-serve.toml --log-format json
  rtr-serve check-config /etc/rtr-serve/rtr-serve.toml && systemctl reload rtr-serve
  rtr-serve --source /var/lib/rpki-client/json --slurm /etc/rtr-serve/local.json
"""

CHECK_CONFIG_DESCRIPTION = """\
Validate an rtr-serve configuration file the way "rtr-serve --config FILE" would read it:
TOML syntax, every key and its type, groups and sources, source URLs, timers. Nothing but
FILE is read and no network connection is made.
Prints what would run (listen addresses, timers, groups and their sources).
"""

CHECK_CONFIG_EPILOG = """\
exit status:
  0  the file is valid (a summary is printed on standard output)
  2  the file is invalid; one line on standard error names the file and the bad key by its
     path, e.g. "rtr.toml: sources[1].group: no group named 'backup'"

examples:
  rtr-serve check-config /etc/rtr-serve/rtr-serve.toml
  rtr-serve check-config new.toml && cp new.toml /etc/rtr-serve/rtr-serve.toml \\
      && systemctl reload rtr-serve
"""


class OptionParser(argparse.ArgumentParser):
    """An argument parser that keeps its options by destination (`options`), for the TOML merge.

    argparse has no public map from a destination to its action; `option` adds an argument to
    the parser or one of its groups and records the action it returns.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build the parser; no option yet."""
        super().__init__(*args, **kwargs)
        #: Every option added with `option`, by its destination.
        self.options: dict[str, argparse.Action] = {}

    def option(self, container: Any, *flags: str, **kwargs: Any) -> argparse.Action:
        """``container.add_argument(*flags, **kwargs)``, recorded in `options`."""
        action: argparse.Action = container.add_argument(*flags, **kwargs)
        self.options[action.dest] = action
        return action

    def error(self, message: str) -> NoReturn:
        """Exit 2 with one line (no usage dump)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _number(convert: Callable[[str], float], *, positive: bool) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then require > 0 (``positive``) or >= 0."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text}") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(
                f"must be {'positive' if positive else 'zero or more'}, got {text}"
            )
        return value

    return parse


_positive_float = _number(float, positive=True)
_non_negative_float = _number(float, positive=False)
_positive_int = _number(int, positive=True)
_non_negative_int = _number(int, positive=False)


def _time(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _state_location(text: str) -> StateLocation:
    try:
        return parse_state_location(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _reader_location(text: str) -> StateLocation:
    try:
        return parse_state_location(text, reader=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _network(text: str) -> Network:
    try:
        return parse_network(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> OptionParser:
    """The argument parser of ``rtr-serve``."""
    p = OptionParser(
        prog="rtr-serve",
        allow_abbrev=False,  # options are matched exactly, also when merging a config file
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.option(p, "--version", action="version", version=f"rtr-serve {__version__}")
    p.option(
        p,
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML configuration file (groups, sources, [server] options); options given on "
        "the command line override it, and --source replaces its [[sources]]; re-read on "
        "SIGHUP (default: none)",
    )
    src = p.add_argument_group("sources")
    p.option(
        src,
        "--source",
        action="append",
        default=[],
        metavar="PATH",
        help="JSON export to serve: a file (plain, .gz, .bz2 or .xz), an http(s):// URL or "
        "an rtr://HOST[:PORT] cache; repeat to merge several (required without --config)",
    )
    p.option(
        src,
        "--poll-interval",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds between checks of each source for changes (default 10)",
    )
    p.option(
        src,
        "--reference-time",
        type=_time,
        metavar="ISO8601",
        help="evaluate entry expiry at this fixed UTC time instead of now (for old exports)",
    )
    p.option(
        src,
        "--slurm",
        action="append",
        default=[],
        metavar="FILE",
        help="SLURM file (RFC 8416; slurmVersion 2 adds ASPA filters and assertions) applied to "
        "the served data: filters first, then assertions; repeat for several (they must not "
        "overlap); reloaded on change, an invalid change is logged and the previous policy kept",
    )
    p.option(
        src,
        "--max-aspa-providers",
        type=_positive_int,
        default=10_000,
        metavar="N",
        help="reject exports with an ASPA of more than N providers (default 10000, max 16380)",
    )
    rtr = p.add_argument_group("RTR service")
    p.option(
        rtr,
        "--listen",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="address to serve routers on; repeat for several; [ADDR]:PORT for IPv6 "
        "(default 127.0.0.1:8323)",
    )
    p.option(
        rtr,
        "--notify-interval",
        type=_non_negative_float,
        default=60.0,
        metavar="S",
        help="at most one Serial Notify per session per S seconds (default 60, as RFC 8210 "
        "asks; 0 for labs); a session not notified within S is notified at once",
    )
    p.option(
        rtr,
        "--history",
        type=_non_negative_int,
        default=10,
        metavar="N",
        help="serials kept for incremental Serial Query answers (default 10)",
    )
    p.option(
        rtr,
        "--refresh",
        type=int,
        default=3600,
        metavar="S",
        help="Refresh Interval sent in End of Data, seconds, 1..86400 (default 3600)",
    )
    p.option(
        rtr,
        "--retry",
        type=int,
        default=600,
        metavar="S",
        help="Retry Interval sent in End of Data, seconds, 1..7200 (default 600)",
    )
    p.option(
        rtr,
        "--expire",
        type=int,
        default=7200,
        metavar="S",
        help="Expire Interval sent in End of Data, seconds, 600..172800, above refresh and "
        "retry (default 7200)",
    )
    p.option(
        rtr,
        "--max-version",
        type=int,
        choices=range(MAX_VERSION + 1),
        default=MAX_VERSION,
        metavar="V",
        help=f"highest RTR version offered, 0..{MAX_VERSION} (default {MAX_VERSION})",
    )
    sec = p.add_argument_group("TLS and access control")
    p.option(
        sec,
        "--listen-tls",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="address to serve RTR over TLS on (8210bis §9.2; the registered port is 324); "
        "repeat for several; needs --tls-cert and --tls-key",
    )
    p.option(sec, "--tls-cert", type=Path, metavar="FILE", help="server certificate (PEM)")
    p.option(sec, "--tls-key", type=Path, metavar="FILE", help="server private key (PEM)")
    p.option(
        sec,
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="require router certificates issued by this CA (PEM), whose subjectAltName "
        "iPAddress entries must include the router's address",
    )
    p.option(
        sec,
        "--tls-handshake-timeout",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="close a TLS connection whose handshake takes longer than S seconds (default 10)",
    )
    p.option(
        sec,
        "--allow",
        action="append",
        type=_network,
        default=[],
        metavar="NET",
        help="admit routers only from this network (e.g. 192.0.2.0/24); repeat for several; "
        "applies to every listener; others are closed at accept (default: everyone)",
    )
    add_ssh_options(p)
    lim = p.add_argument_group("limits")
    p.option(
        lim,
        "--max-connections",
        type=_positive_int,
        default=4096,
        metavar="N",
        help="connections at once; at the cap the oldest one that has sent no query yet makes "
        "way for a newcomer, and only when all are router sessions is it refused (default 4096; "
        "lowered with a warning when the open-file limit cannot hold it)",
    )
    p.option(
        lim,
        "--max-per-ip",
        type=_positive_int,
        default=256,
        metavar="N",
        help="connections per router address; the same rule per address (default 256)",
    )
    p.option(
        lim,
        "--query-timeout",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="close a connection that sends no query within S seconds (default 60)",
    )
    p.option(
        lim,
        "--arrival-hold",
        type=_non_negative_float,
        default=50.0,
        metavar="S",
        help="hold a query that arrives before the first data up to S seconds and answer it "
        "with the data; after S, No Data Available (default 50; 0 answers No Data at once)",
    )
    p.option(
        lim,
        "--write-timeout",
        type=_positive_float,
        metavar="S",
        help="drop a router that accepts no data for S seconds (default 3 x --retry)",
    )
    p.option(
        lim,
        "--shutdown-notice",
        choices=[n.value for n in ShutdownNotice],
        default=ShutdownNotice.RESTART.value,
        help="what v2 routers are told on SIGTERM: restart = Error 12 Cache Restart (keep "
        "data), shutdown = Error 13 Cache Shutdown (flush) (default restart)",
    )
    st = p.add_argument_group("persisted state")
    p.option(
        st,
        "--state",
        metavar="BACKEND:PATH",
        type=_state_location,
        help="persist published data in sqlite:PATH or duckdb:PATH and recover what is still "
        "valid from it at start (a new RTR session); one owner per file (default: memory only)",
    )
    p.option(
        st,
        "--state-reader",
        metavar="sqlite:PATH",
        type=_reader_location,
        help="serve another rtr-serve's SQLite state read-only instead of running sources "
        "(polls it every second; same data, own session and serials)",
    )
    p.option(
        st,
        "--flush-timeout",
        type=_positive_float,
        default=30.0,
        metavar="S",
        help="on SIGTERM/SIGINT wait at most S seconds for the last published state to be "
        "committed; if it is not, the log says so and the exit status is 1 (default 30)",
    )
    web = p.add_argument_group("HTTP API and metrics")
    p.option(
        web,
        "--http",
        metavar="HOST:PORT",
        help="serve /metrics, /status, /healthz, /json, the query API and the dashboard on "
        "this address, e.g. 127.0.0.1:8080 (loopback; the host must be given; default off)",
    )
    p.option(
        web,
        "--metrics-router-lag",
        action="store_true",
        help="export rtr_router_serial_lag, one series per connected router (needs --http)",
    )
    p.option(
        web,
        "--health-stale-after",
        type=_positive_float,
        default=DEFAULT_STALE_AFTER,
        metavar="S",
        help="/healthz fails when no source is ok and the newest successful load is older "
        f"than S seconds (default {DEFAULT_STALE_AFTER:g})",
    )
    run = p.add_argument_group("process")
    p.option(
        run,
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="log verbosity; debug also shows every HTTP request (default info)",
    )
    p.option(
        run,
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text: one readable line per event; json: one JSON object per line with ts, "
        "level, logger, msg and the event's fields (default text)",
    )
    p.option(
        run,
        "--async-backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop to run on (default asyncio)",
    )
    return p


def build_check_config_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rtr-serve check-config``."""
    p = OptionParser(
        prog="rtr-serve check-config",
        allow_abbrev=False,
        description=CHECK_CONFIG_DESCRIPTION,
        epilog=CHECK_CONFIG_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the TOML configuration file")
    return p
