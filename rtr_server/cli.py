"""The ``rtr-serve`` command line: arguments to `AppConfig`, logging, signals, the event loop.

Bad arguments exit with status 2 and one line saying what is wrong, before any file or network
is touched. SIGTERM and SIGINT stop the server cleanly (v2 routers are told Cache Restart, or
Cache Shutdown with ``--shutdown-notice shutdown``) and the process exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import anyio

from rtr_server import __version__
from rtr_server.app import AppConfig, run_app
from rtr_server.config_file import ConfigError, FileConfig, load_config_file
from rtr_server.protocol import MAX_VERSION, Timers
from rtr_server.settings import ServerSettings, ShutdownNotice, parse_listen
from upstream.slurm_files import load_slurm_files

log = logging.getLogger("rtr_server")

DESCRIPTION = """\
RPKI-to-Router (RTR) cache server. Reads validated RPKI payload (VRPs, ASPAs, BGPsec router
keys) from JSON exports of rpki-client, Routinator or StayRTR and serves it to routers over
RTR version 0 (RFC 6810), 1 (RFC 8210) and 2 (draft-ietf-sidrops-8210bis, with ASPA).
"""

EPILOG = """\
examples:
  rtr-serve --source /var/lib/rpki-client/json --listen 127.0.0.1:8323
  rtr-serve --source a.json --source b.json.bz2 --listen [::]:323 --listen 0.0.0.0:323
  rtr-serve --source old-export.json.bz2 --reference-time 2025-07-20T09:31:33Z
  rtr-serve --source /var/lib/rpki-client/json --slurm /etc/rtr-serve/local.json

Several --source files are merged (union). A source file that does not exist yet is waited
for; routers get "No Data Available" until the first data is loaded. An invalid update is
rejected with the reason and the previous data keeps serving.
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
        "the command line override it, and --source replaces its [[sources]]",
    )
    src = p.add_argument_group("sources")
    src.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PATH",
        help="JSON export to serve (plain, .gz, .bz2 or .xz); repeat to merge several",
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
        help="Refresh Interval sent in End of Data, 1..86400 (default 3600)",
    )
    rtr.add_argument(
        "--retry",
        type=int,
        default=600,
        metavar="S",
        help="Retry Interval sent in End of Data, 1..7200 (default 600)",
    )
    rtr.add_argument(
        "--expire",
        type=int,
        default=7200,
        metavar="S",
        help="Expire Interval sent in End of Data, 600..172800, above refresh and retry "
        "(default 7200)",
    )
    rtr.add_argument(
        "--max-version",
        type=int,
        choices=range(MAX_VERSION + 1),
        default=MAX_VERSION,
        metavar="V",
        help=f"highest RTR version offered, 0..{MAX_VERSION} (default {MAX_VERSION})",
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
        help="drop a router that accepts no data for S seconds (default 3 x retry)",
    )
    lim.add_argument(
        "--shutdown-notice",
        choices=[n.value for n in ShutdownNotice],
        default=ShutdownNotice.RESTART.value,
        help="what v2 routers are told on SIGTERM: restart = Error 12 Cache Restart (keep "
        "data), shutdown = Error 13 Cache Shutdown (flush) (default restart)",
    )
    run = p.add_argument_group("process")
    run.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="log verbosity (default info)",
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
    settings = ServerSettings(
        listen=tuple(parse_listen(v) for v in (args.listen or ["127.0.0.1:8323"])),
        timers=timers,
        notify_interval=args.notify_interval,
        max_version=args.max_version,
        max_connections=args.max_connections,
        max_per_ip=args.max_per_ip,
        query_timeout=args.query_timeout,
        write_timeout=args.write_timeout,
        shutdown_notice=ShutdownNotice(args.shutdown_notice),
    )
    file_config: FileConfig | None = getattr(args, "file_config", None)
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
        slurm=slurm,
    )


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
    out.write(f"  listen: {', '.join(str(a) for a in config.server.listen)}\n")
    t = config.server.timers
    out.write(
        f"  timers: refresh {t.refresh} s, retry {t.retry} s, expire {t.expire} s; "
        f"notify interval {config.server.notify_interval:g} s; history {config.history}\n"
    )
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


async def _serve(config: AppConfig) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        await run_app(config)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rtr-serve`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check-config"]:
        if len(argv) != 2:
            sys.stderr.write("usage: rtr-serve check-config FILE\n")
            return 2
        return check_config(Path(argv[1]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        apply_config_file(parser, args, argv)
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log.info(
        "rtr-serve %s starting on %s (%s)",
        __version__,
        ", ".join(str(a) for a in config.server.listen),
        args.async_backend,
    )
    try:
        anyio.run(_serve, config, backend=args.async_backend)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        log.error("cannot serve: %s", exc)
        return 1
    log.info("rtr-serve stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
