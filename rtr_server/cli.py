"""The ``rtr-serve`` command line: arguments to `AppConfig`, logging, signals, the event loop.

Bad arguments exit with status 2 and one line saying what is wrong, before any file or network
is touched. SIGTERM and SIGINT stop the server in order (`App.stop`): with ``--state`` the last
published state is committed within ``--flush-timeout`` (a second signal stops that wait), then
v2 routers are told Cache Restart (or Cache Shutdown with ``--shutdown-notice shutdown``); the
process exits 0, or 1 when that state could not be persisted. SIGHUP reloads the ``--config``
file (see `rtr_server.reload`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import anyio
from anyio.abc import TaskStatus

from persistence.errors import PersistenceError
from persistence.location import StateLocation, parse_state_location
from rtr_server import __version__, gen_cert
from rtr_server.access import Network, parse_network, parse_networks
from rtr_server.app import App, run_app
from rtr_server.app_config import AppConfig
from rtr_server.config_file import ConfigError, FileConfig, load_config_file
from rtr_server.http.settings import DEFAULT_STALE_AFTER, HttpSettings, parse_http_address
from rtr_server.logs import LOG_FORMATS, LOG_LEVELS, LogSettings, configure
from rtr_server.protocol import MAX_VERSION, Timers
from rtr_server.reload import ProcessConfig, Reloader
from rtr_server.settings import (
    ListenAddress,
    ServerSettings,
    ShutdownNotice,
    TlsFiles,
    parse_listen,
)
from rtr_server.shutdown import ShutdownReport
from rtr_server.tls import make_server_context
from upstream.slurm_files import load_slurm_files

log = logging.getLogger("rtr_server")

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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rtr-serve``."""
    p = _Parser(
        prog="rtr-serve",
        allow_abbrev=False,  # options are matched exactly, also when merging a config file
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rtr-serve {__version__}")
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML configuration file (groups, sources, [server] options); options given on "
        "the command line override it, and --source replaces its [[sources]]; re-read on "
        "SIGHUP (default: none)",
    )
    src = p.add_argument_group("sources")
    src.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PATH",
        help="JSON export to serve: a file (plain, .gz, .bz2 or .xz), an http(s):// URL or "
        "an rtr://HOST[:PORT] cache; repeat to merge several (required without --config)",
    )
    src.add_argument(
        "--poll-interval",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds between checks of each source for changes (default 10)",
    )
    src.add_argument(
        "--reference-time",
        type=_time,
        metavar="ISO8601",
        help="evaluate entry expiry at this fixed UTC time instead of now (for old exports)",
    )
    src.add_argument(
        "--slurm",
        action="append",
        default=[],
        metavar="FILE",
        help="SLURM file (RFC 8416; slurmVersion 2 adds ASPA filters and assertions) applied to "
        "the served data: filters first, then assertions; repeat for several (they must not "
        "overlap); reloaded on change, an invalid change is logged and the previous policy kept",
    )
    src.add_argument(
        "--max-aspa-providers",
        type=_positive_int,
        default=10_000,
        metavar="N",
        help="reject exports with an ASPA of more than N providers (default 10000, max 16380)",
    )
    rtr = p.add_argument_group("RTR service")
    rtr.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="address to serve routers on; repeat for several; [ADDR]:PORT for IPv6 "
        "(default 127.0.0.1:8323)",
    )
    rtr.add_argument(
        "--notify-interval",
        type=_non_negative_float,
        default=60.0,
        metavar="S",
        help="at most one Serial Notify round per S seconds (default 60, as RFC 8210 asks; "
        "0 for labs)",
    )
    rtr.add_argument(
        "--history",
        type=_non_negative_int,
        default=10,
        metavar="N",
        help="serials kept for incremental Serial Query answers (default 10)",
    )
    rtr.add_argument(
        "--refresh",
        type=int,
        default=3600,
        metavar="S",
        help="Refresh Interval sent in End of Data, seconds, 1..86400 (default 3600)",
    )
    rtr.add_argument(
        "--retry",
        type=int,
        default=600,
        metavar="S",
        help="Retry Interval sent in End of Data, seconds, 1..7200 (default 600)",
    )
    rtr.add_argument(
        "--expire",
        type=int,
        default=7200,
        metavar="S",
        help="Expire Interval sent in End of Data, seconds, 600..172800, above refresh and "
        "retry (default 7200)",
    )
    rtr.add_argument(
        "--max-version",
        type=int,
        choices=range(MAX_VERSION + 1),
        default=MAX_VERSION,
        metavar="V",
        help=f"highest RTR version offered, 0..{MAX_VERSION} (default {MAX_VERSION})",
    )
    sec = p.add_argument_group("TLS and access control")
    sec.add_argument(
        "--listen-tls",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="address to serve RTR over TLS on (8210bis §9.2; the registered port is 324); "
        "repeat for several; needs --tls-cert and --tls-key",
    )
    sec.add_argument("--tls-cert", type=Path, metavar="FILE", help="server certificate (PEM)")
    sec.add_argument("--tls-key", type=Path, metavar="FILE", help="server private key (PEM)")
    sec.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="require router certificates issued by this CA (PEM), whose subjectAltName "
        "iPAddress entries must include the router's address",
    )
    sec.add_argument(
        "--tls-handshake-timeout",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="close a TLS connection whose handshake takes longer than S seconds (default 10)",
    )
    sec.add_argument(
        "--allow",
        action="append",
        type=_network,
        default=[],
        metavar="NET",
        help="admit routers only from this network (e.g. 192.0.2.0/24); repeat for several; "
        "applies to every listener; others are closed at accept (default: everyone)",
    )
    lim = p.add_argument_group("limits")
    lim.add_argument(
        "--max-connections",
        type=_positive_int,
        default=4096,
        metavar="N",
        help="routers served at once; more are closed at accept (default 4096)",
    )
    lim.add_argument(
        "--max-per-ip",
        type=_positive_int,
        default=256,
        metavar="N",
        help="connections per router address; more are closed at accept (default 256)",
    )
    lim.add_argument(
        "--query-timeout",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="close a connection that sends no query within S seconds (default 60)",
    )
    lim.add_argument(
        "--write-timeout",
        type=_positive_float,
        metavar="S",
        help="drop a router that accepts no data for S seconds (default 3 x --retry)",
    )
    lim.add_argument(
        "--shutdown-notice",
        choices=[n.value for n in ShutdownNotice],
        default=ShutdownNotice.RESTART.value,
        help="what v2 routers are told on SIGTERM: restart = Error 12 Cache Restart (keep "
        "data), shutdown = Error 13 Cache Shutdown (flush) (default restart)",
    )
    st = p.add_argument_group("persisted state")
    st.add_argument(
        "--state",
        metavar="BACKEND:PATH",
        type=_state_location,
        help="persist published data in sqlite:PATH or duckdb:PATH and recover what is still "
        "valid from it at start (a new RTR session); one owner per file (default: memory only)",
    )
    st.add_argument(
        "--state-reader",
        metavar="sqlite:PATH",
        type=_reader_location,
        help="serve another rtr-serve's SQLite state read-only instead of running sources "
        "(polls it every second; same data, own session and serials)",
    )
    st.add_argument(
        "--flush-timeout",
        type=_positive_float,
        default=30.0,
        metavar="S",
        help="on SIGTERM/SIGINT wait at most S seconds for the last published state to be "
        "committed; if it is not, the log says so and the exit status is 1 (default 30)",
    )
    web = p.add_argument_group("HTTP API and metrics")
    web.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve /metrics, /status, /healthz, /json, the query API and the dashboard on "
        "this address, e.g. 127.0.0.1:8080 (loopback; the host must be given; default off)",
    )
    web.add_argument(
        "--metrics-router-lag",
        action="store_true",
        help="export rtr_router_serial_lag, one series per connected router (needs --http)",
    )
    web.add_argument(
        "--health-stale-after",
        type=_positive_float,
        default=DEFAULT_STALE_AFTER,
        metavar="S",
        help="/healthz fails when no source is ok and the newest successful load is older "
        f"than S seconds (default {DEFAULT_STALE_AFTER:g})",
    )
    run = p.add_argument_group("process")
    run.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="log verbosity; debug also shows every HTTP request (default info)",
    )
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text: one readable line per event; json: one JSON object per line with ts, "
        "level, logger, msg and the event's fields (default text)",
    )
    run.add_argument(
        "--async-backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop to run on (default asyncio)",
    )
    return p


def config_from_args(args: argparse.Namespace) -> AppConfig:
    """Validate parsed arguments into an `AppConfig` (raises ValueError with a clear message)."""
    try:
        timers = Timers(refresh=args.refresh, retry=args.retry, expire=args.expire)
    except ValueError as exc:
        where = "server.refresh/retry/expire" if args.config else "--refresh/--retry/--expire"
        raise ValueError(f"{where}: {exc}") from None
    if not 1 <= args.max_aspa_providers <= 16_380:
        raise ValueError("--max-aspa-providers must be in 1..16380")
    file_config: FileConfig | None = getattr(args, "file_config", None)
    listen = listen_addresses(args, file_config)
    tls = tls_files(args, listen)
    settings = ServerSettings(
        listen=listen,
        timers=timers,
        notify_interval=args.notify_interval,
        max_version=args.max_version,
        max_connections=args.max_connections,
        max_per_ip=args.max_per_ip,
        query_timeout=args.query_timeout,
        write_timeout=args.write_timeout,
        shutdown_notice=ShutdownNotice(args.shutdown_notice),
        tls=tls,
        tls_handshake_timeout=args.tls_handshake_timeout,
    )
    http = None
    if args.http is not None:
        http = HttpSettings(
            parse_http_address(args.http),
            router_lag=args.metrics_router_lag,
            stale_after=args.health_stale_after,
        )
    elif args.metrics_router_lag:
        raise ValueError("--metrics-router-lag needs --http")
    use_file_sources = file_config is not None and not args.source
    slurm = tuple(str(p) for p in args.slurm)
    if slurm:
        # Read now: an invalid or missing SLURM file is a configuration error at start.
        try:
            load_slurm_files(slurm)
        except ValueError as exc:
            raise ValueError(f"{'server.slurm' if args.config else '--slurm'}: {exc}") from None
    return AppConfig(
        sources=tuple(args.source),
        server=settings,
        groups=file_config.groups if use_file_sources and file_config else (),
        group_sources=file_config.sources if use_file_sources and file_config else (),
        poll_interval=args.poll_interval,
        history=args.history,
        reference_time=args.reference_time,
        max_aspa_providers=args.max_aspa_providers,
        state=args.state,
        state_reader=args.state_reader,
        http=http,
        slurm=slurm,
        flush_timeout=args.flush_timeout,
    )


def listen_addresses(
    args: argparse.Namespace, file_config: FileConfig | None
) -> tuple[ListenAddress, ...]:
    """What to listen on: --listen and --listen-tls with the --allow networks, and more.

    Those options may come from [server] listen, listen_tls and allow; the file's
    [[listeners]] are added unless --listen or --listen-tls is on the command line (a
    listener without its own ``allow`` takes the server-wide one).
    """
    allow = parse_networks(str(n) for n in args.allow) if args.allow else None
    listen = [dataclasses.replace(parse_listen(v), allow=allow) for v in args.listen]
    listen += [dataclasses.replace(parse_listen(v), tls=True, allow=allow) for v in args.listen_tls]
    if file_config is not None and not getattr(args, "listen_on_command_line", False):
        listen += [
            a if a.allow is not None else dataclasses.replace(a, allow=allow)
            for a in file_config.listeners
        ]
    return tuple(listen) or (ListenAddress("127.0.0.1", 8323, allow=allow),)


def tls_files(args: argparse.Namespace, listen: tuple[ListenAddress, ...]) -> TlsFiles | None:
    """The TLS files, checked by building the context once (raises ValueError, one line)."""
    config = args.config is not None
    cert, key = ("server.tls_cert", "server.tls_key") if config else ("--tls-cert", "--tls-key")
    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise ValueError(f"a TLS client CA needs {cert} and {key}")
        if any(a.tls for a in listen):
            raise ValueError(f"TLS listeners need {cert} and {key}")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise ValueError(f"give both {cert} and {key}")
    files = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    make_server_context(files)
    return files


def apply_config_file(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str] | None
) -> None:
    """Fill ``args`` from ``args.config`` where the command line did not set an option."""
    path: Path | None = args.config
    if path is None:
        return
    file_config = load_config_file(path)
    actions = {a.dest: a for a in parser._actions}  # noqa: SLF001 - argparse has no public map
    given = list(argv or [])
    explicit = {
        dest
        for dest, action in actions.items()
        for option in action.option_strings
        if any(arg == option or arg.startswith(option + "=") for arg in given)
    }
    args.listen_on_command_line = bool(explicit & {"listen", "listen_tls"})
    for key, value in file_config.server.items():
        if key in explicit:
            continue
        action = actions[key]
        try:
            if isinstance(value, list):
                converted: object = [str(v) for v in value]
            elif action.type is not None and callable(action.type):
                converted = action.type(str(value))
            else:
                converted = value
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigError(f"{path}: server.{key}: {exc}") from None
        if action.choices is not None and converted not in action.choices:
            choices = ", ".join(map(str, action.choices))
            raise ConfigError(f"{path}: server.{key}: {value!r} is not one of {choices}")
        setattr(args, key, converted)
    args.file_config = file_config


def load_process_config(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[argparse.Namespace, ProcessConfig]:
    """Parse ``argv``, merge its --config file and validate; raises ValueError when invalid.

    Used at start and again for every reload (the command line keeps overriding the file).
    """
    args = parser.parse_args(argv)
    apply_config_file(parser, args, argv)
    config = config_from_args(args)
    return args, ProcessConfig(
        config, LogSettings(args.log_level, args.log_format), args.async_backend
    )


def build_check_config_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rtr-serve check-config``."""
    p = _Parser(
        prog="rtr-serve check-config",
        allow_abbrev=False,
        description=CHECK_CONFIG_DESCRIPTION,
        epilog=CHECK_CONFIG_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the TOML configuration file")
    return p


def check_config(path: Path) -> int:
    """``rtr-serve check-config FILE``: validate without any network activity; 0 when valid."""
    parser = build_parser()
    args = parser.parse_args(["--config", str(path)])
    try:
        apply_config_file(parser, args, ["--config", str(path)])
        config = config_from_args(args)
    except ValueError as exc:
        message = str(exc)
        sys.stderr.write(
            f"rtr-serve: {message if str(path) in message else f'{path}: {message}'}\n"
        )
        return 2
    out = sys.stdout
    out.write(f"{path}: valid\n")
    out.write(f"  listen: {', '.join(a.describe() for a in config.server.listen)}\n")
    if config.state is not None:
        out.write(f"  state: {config.state} (persisted; recovered at start)\n")
    if config.state_reader is not None:
        out.write(f"  state reader: {config.state_reader} (read-only follower)\n")
    tls = config.server.tls
    if tls is not None:
        out.write(
            f"  tls: certificate {tls.cert}, key {tls.key}, "
            + (f"router certificates from {tls.client_ca}" if tls.client_ca else "no client CA")
            + f"; handshake timeout {config.server.tls_handshake_timeout:g} s\n"
        )
    if config.http is not None:
        out.write(f"  http: {config.http.listen}\n")
    t = config.server.timers
    out.write(
        f"  timers: refresh {t.refresh} s, retry {t.retry} s, expire {t.expire} s; "
        f"notify interval {config.server.notify_interval:g} s; history {config.history}\n"
    )
    out.write(f"  logging: level {args.log_level}, format {args.log_format}\n")
    if config.group_sources:
        for group in sorted(config.groups, key=lambda g: g.priority):
            out.write(
                f"  group {group.name} (priority {group.priority}, startup timeout "
                f"{group.startup_timeout:g} s, fail-back delay {group.failback_delay:g} s)\n"
            )
            for source in config.group_sources:
                if source.group == group.name:
                    out.write(f"    source {source.name}: {source.url}\n")
    else:
        for spec in config.sources:
            out.write(f"  source {spec}\n")
    if config.slurm:
        policy = load_slurm_files(config.slurm)
        out.write(f"  slurm {', '.join(config.slurm)}: {policy.summary()}\n")
    return 0


def _persistence_error(exc: BaseException) -> PersistenceError | None:
    """The persistence refusal inside ``exc`` (possibly wrapped in exception groups)."""
    if isinstance(exc, PersistenceError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _persistence_error(exc.exceptions[0])
    return None


async def _serve(
    process: ProcessConfig, load: Callable[[], ProcessConfig] | None, origin: str
) -> ShutdownReport | None:
    """Run the app with its reloader until a stop signal; how the stop ended (None: early)."""
    async with anyio.create_task_group() as tg:
        stopper = _Stopper(tg.cancel_scope)
        await tg.start(stopper.run, name="stop signals")
        with anyio.open_signal_receiver(signal.SIGHUP) as hangups:
            stopper.app = await tg.start(_run_app, process.app, tg.cancel_scope)
            with stopper.reloads:  # the first stop signal ends reloading
                await Reloader(stopper.app, process, load, origin=origin).serve(hangups)
            await anyio.sleep_forever()  # until the app has closed in order (it cancels tg)
    return None if stopper.app is None else stopper.app.shutdown


async def _run_app(
    config: AppConfig, scope: anyio.CancelScope, *, task_status: TaskStatus[App]
) -> None:
    """`run_app`; once it returned (an orderly stop), the rest is cancelled.

    A failure is not followed by a cancel: before the app started it is raised by `tg.start`,
    after that the task group cancels the rest itself (a cancel here would swallow a refusal
    at start, e.g. a state file that cannot be used, and exit 0).
    """
    await run_app(config, task_status=task_status)
    scope.cancel()


class _Stopper:
    """SIGTERM/SIGINT: the first stops the app in order, a second stops the final wait.

    A signal before the app runs (during recovery) cancels the start.
    """

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.reloads = anyio.CancelScope()
        self.app: App | None = None

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            stopping = False
            async for signum in signals:
                name = signal.Signals(signum).name
                if self.app is None:
                    log.info("received %s: shutting down", name)
                    self.scope.cancel()
                    return
                if not stopping:
                    stopping = True
                    log.info("received %s: shutting down", name)
                    self.reloads.cancel()
                    self.app.stop()
                    continue
                log.warning(
                    "received %s again: no longer waiting for the state to be persisted", name
                )
                self.app.abort_stop(f"the wait was cut short by a second {name}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rtr-serve`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gen-cert"]:
        return gen_cert.main(argv[1:])
    if argv[:1] == ["check-config"]:
        return check_config(build_check_config_parser().parse_args(argv[1:]).file)
    parser = build_parser()
    try:
        args, process = load_process_config(parser, argv)
    except ValueError as exc:
        parser.error(str(exc))
    config = process.app
    configure(process.logging)
    log.info(
        "rtr-serve %s starting on %s (%s)",
        __version__,
        ", ".join(a.describe() for a in config.server.listen),
        args.async_backend,
    )

    def reload_config() -> ProcessConfig:
        return load_process_config(parser, argv)[1]

    load = reload_config if args.config is not None else None
    # Until the event loop listens for it, a SIGHUP (an early `systemctl reload`) would kill
    # the process: ignore it; `_serve` then handles every SIGHUP.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    report: ShutdownReport | None = None
    try:
        report = anyio.run(_serve, process, load, str(args.config), backend=args.async_backend)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        log.error("cannot serve: %s", exc)
        return 1
    except (PersistenceError, BaseExceptionGroup) as exc:
        refusal = _persistence_error(exc)
        if refusal is None:
            raise
        log.error("cannot use state %s: %s", config.state, refusal)
        return 1
    if report is not None and report.persisted is False:
        log.info("rtr-serve stopped (exit status 1: the last published state is not persisted)")
        return 1
    log.info("rtr-serve stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
