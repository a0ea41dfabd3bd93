"""Parsed arguments and a ``--config`` file to the process's configuration; ``check-config``.

No network is touched: `config_from_args` checks every value (a `ValueError` with a clear
message), `apply_config_file` merges the TOML file under the command line, `check_config`
reports what a file would run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from rtr_protocol import Timers
from rtr_server.access import parse_networks
from rtr_server.app_config import AppConfig
from rtr_server.cli_args import OptionParser, build_parser
from rtr_server.cli_ssh import ssh_settings
from rtr_server.config_file import ConfigError, FileConfig, load_config_file
from rtr_server.continuity import continuation_from_env
from rtr_server.http.settings import HttpSettings, parse_http_address
from rtr_server.logs import LogSettings
from rtr_server.reload import ProcessConfig
from rtr_server.settings import (
    ListenAddress,
    ServerSettings,
    ShutdownNotice,
    TlsFiles,
    parse_listen,
)
from rtr_server.socket_activation import (
    InheritedSocket,
    adopted_connections,
    inherited_sockets,
)
from rtr_server.tls import make_server_context
from upstream.slurm_files import load_slurm_files

__all__ = [
    "activated_sockets",
    "apply_config_file",
    "check_config",
    "config_from_args",
    "listen_addresses",
    "load_process_config",
    "tls_files",
]


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
    inherited = activated_sockets()
    tls = tls_files(args, listen)
    ssh = ssh_settings(
        args,
        listen,
        file_config.ssh_users if file_config else (),
        activated=any(s.name == "rtr-ssh" for s in inherited),
    )
    settings = ServerSettings(
        listen=listen,
        timers=timers,
        notify_interval=args.notify_interval,
        max_version=args.max_version,
        max_connections=args.max_connections,
        max_per_ip=args.max_per_ip,
        query_timeout=args.query_timeout,
        arrival_hold=args.arrival_hold,
        write_timeout=args.write_timeout,
        shutdown_notice=ShutdownNotice(args.shutdown_notice),
        tls=tls,
        tls_handshake_timeout=args.tls_handshake_timeout,
        inherited=inherited,
        adopted=adopted_connections(),
        continued=continuation_from_env(),
        ssh=ssh,
    )
    http = None
    http_socket = next((s for s in inherited if s.name == "http"), None)
    if args.http is not None or http_socket is not None:
        http = HttpSettings(
            parse_http_address(args.http)
            if http_socket is None
            else ListenAddress(http_socket.host, http_socket.port),
            router_lag=args.metrics_router_lag,
            stale_after=args.health_stale_after,
            inherited_fd=None if http_socket is None else http_socket.fd,
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
    """What to listen on: --listen, --listen-tls and --listen-ssh with the --allow networks.

    Those options may come from [server] listen, listen_tls, listen_ssh and allow; the file's
    [[listeners]] are added unless one of the three is on the command line (a listener
    without its own ``allow`` takes the server-wide one).
    """
    allow = parse_networks(str(n) for n in args.allow) if args.allow else None
    listen = [dataclasses.replace(parse_listen(v), allow=allow) for v in args.listen]
    listen += [dataclasses.replace(parse_listen(v), tls=True, allow=allow) for v in args.listen_tls]
    listen += [dataclasses.replace(parse_listen(v), ssh=True, allow=allow) for v in args.listen_ssh]
    if file_config is not None and not getattr(args, "listen_on_command_line", False):
        listen += [
            a if a.allow is not None else dataclasses.replace(a, allow=allow)
            for a in file_config.listeners
        ]
    return tuple(listen) or (ListenAddress("127.0.0.1", 8323, allow=allow),)


def activated_sockets() -> tuple[InheritedSocket, ...]:
    """The sockets systemd passed (`rtr_server.socket_activation`); raises ValueError."""
    return inherited_sockets()


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
    parser: OptionParser, args: argparse.Namespace, argv: Sequence[str] | None
) -> None:
    """Fill ``args`` from ``args.config`` where the command line did not set an option."""
    path: Path | None = args.config
    if path is None:
        return
    file_config = load_config_file(path)
    actions = parser.options
    given = list(argv or [])
    explicit = {
        dest
        for dest, action in actions.items()
        for option in action.option_strings
        if any(arg == option or arg.startswith(option + "=") for arg in given)
    }
    args.listen_on_command_line = bool(explicit & {"listen", "listen_tls", "listen_ssh"})
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
    parser: OptionParser, argv: Sequence[str]
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
    ssh = config.server.ssh
    if ssh is not None:
        out.write(
            f"  ssh: host key {ssh.host_key}, authorized keys {ssh.authorized_keys or 'none'}, "
            f"{len(ssh.users)} password users, users "
            + (", ".join(ssh.allow_users) if ssh.allow_users else "any")
            + f"; login timeout {ssh.login_timeout:g} s"
            + (f"; key exchange {', '.join(ssh.kex_algorithms)}" if ssh.kex_algorithms else "")
            + "\n"
        )
    if config.http is not None:
        out.write(f"  http: {config.http.listen}\n")
    t = config.server.timers
    out.write(
        f"  timers: refresh {t.refresh} s, retry {t.retry} s, expire {t.expire} s; "
        f"notify interval {config.server.notify_interval:g} s; history {config.history}\n"
    )
    hold = config.server.arrival_hold
    out.write(
        f"  arrival hold: queries before the first data wait up to {hold:g} s\n"
        if hold
        else "  arrival hold: off (No Data Available before the first data)\n"
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
