"""The TOML configuration file: `load_config_file` checks every key and names bad ones by path.

Shape (every key optional except ``url`` and ``group`` membership rules)::

    [server]                 # every command-line option, by its long name with "_" for "-"
    listen = ["127.0.0.1:8323"]
    notify_interval = 60
    slurm = ["/etc/rtr-serve/local.json"]   # SLURM files (relative: to the working directory)
    [[groups]]
    name = "primary"         # unique
    priority = 10            # unique; lower wins
    startup_timeout = 30     # seconds
    failback_delay = 300     # seconds
    [[sources]]
    name = "validator-a"     # unique; defaults to the url
    url = "rtr://192.0.2.10:3323"   # or https://..., or a file path
    group = "primary"        # optional when there is exactly one group
    [[listeners]]            # more RTR listeners, each with its own allowed networks
    address = "[::]:324"
    tls = true               # needs [server] tls_cert and tls_key
    allow = ["192.0.2.0/24", "2001:db8::/32"]   # default: [server] allow (or everyone)
    tcp_md5 = [{ peer = "192.0.2.0/24", key = "..." }]   # RFC 2385, one key per prefix
    tcp_ao = [{ peer = "2001:db8::1", key_id = 1, rnext_id = 1, algorithm = "hmac(sha256)",
                key = "..." }]       # RFC 5925; needs Linux >= 6.7 with CONFIG_TCP_AO
    # or: ssh = true         # RTR over SSH; needs [server] ssh_host_key and router keys
    [[ssh_users]]            # SSH password users (only here); hash from rtr-serve ssh-password
    name = "rtr"
    password_hash = "scrypt$16384$8$1$..."

Reading the file does no network I/O; a source URL is only parsed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rtr_server.access import parse_networks
from rtr_server.settings import ListenAddress, parse_listen
from rtr_server.ssh_settings import SshUser
from rtr_server.tcp_auth import AoKey, Md5Key, ao_supported, parse_ao_keys, parse_md5_keys
from upstream.config import GroupConfig, SourceConfig

#: [server] keys and the type each must have (int is accepted where a float is expected).
SERVER_KEYS: dict[str, type | tuple[type, ...]] = {
    "listen": list,
    "poll_interval": (int, float),
    "reference_time": str,
    "max_aspa_providers": int,
    "notify_interval": (int, float),
    "history": int,
    "refresh": int,
    "retry": int,
    "expire": int,
    "max_version": int,
    "max_connections": int,
    "max_per_ip": int,
    "query_timeout": (int, float),
    "arrival_hold": (int, float),
    "write_timeout": (int, float),
    "shutdown_notice": str,
    "log_level": str,
    "log_format": str,
    "async_backend": str,
    "state": str,
    "state_reader": str,
    "flush_timeout": (int, float),
    "listen_tls": list,
    "tls_cert": str,
    "tls_key": str,
    "tls_client_ca": str,
    "tls_handshake_timeout": (int, float),
    "allow": list,
    "http": str,
    "metrics_router_lag": bool,
    "health_stale_after": (int, float),
    "slurm": list,
    "listen_ssh": list,
    "ssh_host_key": str,
    "ssh_authorized_keys": str,
    "ssh_allow_user": list,
    "ssh_login_timeout": (int, float),
    "ssh_kex_algorithms": str,
}
#: Keys of a [[listeners]] table.
LISTENER_KEYS: dict[str, type | tuple[type, ...]] = {
    "address": str,
    "tls": bool,
    "allow": list,
    "tcp_md5": list,
    "tcp_ao": list,
    "ssh": bool,
}
SSH_USER_KEYS: dict[str, type | tuple[type, ...]] = {"name": str, "password_hash": str}
GROUP_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "priority": int,
    "startup_timeout": (int, float),
    "failback_delay": (int, float),
}
SOURCE_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "url": str,
    "group": str,
    "poll_interval": (int, float),
    "headers": dict,
    "ca_file": str,
    "max_bytes": int,
    "max_version": int,
    "connect_timeout": (int, float),
    "read_timeout": (int, float),
    "total_timeout": (int, float),
    "retry_initial": (int, float),
    "retry_max": (int, float),
    "watch": bool,
}
_COMMON = {"name", "url", "group", "poll_interval"}
_RETRY = {"connect_timeout", "retry_initial", "retry_max"}
#: The keys each kind of source understands (by URL scheme; "" is a file path).
KEYS_BY_KIND: dict[str, set[str]] = {
    "": _COMMON | {"max_bytes", "watch"},
    "http": _COMMON | _RETRY | {"headers", "ca_file", "max_bytes", "read_timeout", "total_timeout"},
    "rtr": (_COMMON - {"poll_interval"}) | _RETRY | {"max_version"},
}


class ConfigError(ValueError):
    """Raised for an invalid configuration file; the message starts with the key path."""


@dataclass(frozen=True, slots=True)
class FileConfig:
    """What the file says: [server] values by option name, groups and sources."""

    server: dict[str, Any]
    groups: tuple[GroupConfig, ...]
    sources: tuple[SourceConfig, ...]
    #: [[listeners]]; ``allow`` None means "the [server] allow".
    listeners: tuple[ListenAddress, ...] = ()
    #: [[ssh_users]]: SSH password users (stored hashed).
    ssh_users: tuple[SshUser, ...] = ()


def _check_table(
    table: object, path: str, keys: dict[str, type | tuple[type, ...]]
) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: must be a table")
    for key, value in table.items():
        expected = keys.get(key)
        if expected is None:
            raise ConfigError(f"{path}.{key}: unknown key (known: {', '.join(sorted(keys))})")
        if isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
            names = expected if isinstance(expected, tuple) else (expected,)
            wanted = " or ".join(t.__name__ for t in names)
            raise ConfigError(f"{path}.{key}: must be {wanted}, got {value!r}")
    return table


def parse_config(text: str, *, origin: str = "config") -> FileConfig:
    """Parse and check a configuration document (no I/O)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from None
    unknown = set(doc) - {"server", "groups", "sources", "listeners", "ssh_users"}
    if unknown:
        raise ConfigError(
            f"{sorted(unknown)[0]}: unknown section "
            "(known: server, groups, sources, listeners, ssh_users)"
        )
    server = dict(_check_table(doc.get("server", {}), "server", SERVER_KEYS))
    for key in ("listen", "listen_tls", "listen_ssh", "ssh_allow_user"):
        if key in server and not all(isinstance(a, str) for a in server[key]):
            raise ConfigError(f"server.{key}: must be a list of HOST:PORT strings")
    if "allow" in server:
        _networks(server["allow"], "server.allow")
    listeners = _parse_listeners(doc)
    ssh_users = _parse_ssh_users(doc)
    if "slurm" in server and not all(isinstance(a, str) and a for a in server["slurm"]):
        raise ConfigError("server.slurm: must be a list of SLURM file paths")
    groups: list[GroupConfig] = []
    for path, table in _array_of_tables(doc, "groups", GROUP_KEYS, ("name", "priority")):
        try:
            groups.append(GroupConfig(**table))
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    for key in ("name", "priority"):
        seen: dict[object, int] = {}
        for i, group in enumerate(groups):
            value = getattr(group, key)
            if value in seen:
                raise ConfigError(
                    f"groups[{i}].{key}: {value!r} already used by groups[{seen[value]}]"
                )
            seen[value] = i
    group_names = {g.name for g in groups}
    sources: list[SourceConfig] = []
    for path, table in _array_of_tables(doc, "sources", SOURCE_KEYS, ("url",)):
        scheme = table["url"].partition("://")[0] if "://" in table["url"] else ""
        kind = "http" if scheme == "https" else scheme
        for key in sorted(set(table) - KEYS_BY_KIND.get(kind, set(table))):
            raise ConfigError(f"{path}.{key}: not an option of {kind or 'file'} sources")
        group_name = table.get("group")
        if group_name is None:
            if len(groups) > 1:
                raise ConfigError(f"{path}.group: missing (there are several groups)")
            group_name = groups[0].name if groups else "default"
        elif group_name not in group_names:
            raise ConfigError(f"{path}.group: no group named {group_name!r}")
        poll = table.get("poll_interval")
        if poll is not None and poll <= 0:
            raise ConfigError(f"{path}.poll_interval: must be positive")
        name = table.get("name", table["url"])
        headers = table.get("headers", {})
        if not all(isinstance(v, str) for v in headers.values()):
            raise ConfigError(f"{path}.headers: values must be strings")
        for key in ("max_bytes", "max_version"):
            if key in table and table[key] < 0:
                raise ConfigError(f"{path}.{key}: must not be negative")
        timing = ("connect_timeout", "read_timeout", "total_timeout", "retry_initial", "retry_max")
        for key in timing:
            if key in table and table[key] <= 0:
                raise ConfigError(f"{path}.{key}: must be positive")
        sources.append(
            SourceConfig(
                name,
                table["url"],
                group_name,
                poll,
                tuple(headers.items()),
                table.get("ca_file"),
                table.get("max_bytes"),
                table.get("max_version"),
                *(table.get(key) for key in timing),
            )
        )
        if "watch" in table:
            sources[-1] = replace(sources[-1], watch=table["watch"])
    names = [s.name for s in sources]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise ConfigError(f"sources[{i}].name: {name!r} already used")
    if sources and not groups:
        groups.append(GroupConfig("default", 0, startup_timeout=0.0, failback_delay=0.0))
    used = {s.group for s in sources}
    for i, group in enumerate(groups):
        if sources and group.name not in used:
            raise ConfigError(f"groups[{i}]: group {group.name!r} has no sources")
    return FileConfig(server, tuple(groups), tuple(sources), listeners, ssh_users)


def _networks(value: list[Any], path: str) -> tuple[Any, ...]:
    if not value:
        raise ConfigError(f"{path}: must not be empty (leave it out to admit every address)")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{path}[{i}]: must be a network string, got {item!r}")
        try:
            parse_networks([item])
        except ValueError as exc:
            raise ConfigError(f"{path}[{i}]: {exc}") from None
    return parse_networks(value)


def _array_of_tables(
    doc: dict[str, Any],
    section: str,
    keys: dict[str, type | tuple[type, ...]],
    required: tuple[str, ...],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``[[section]]`` tables one by one, each checked and with its key path (for errors).

    Lazy, so a table's own later checks fail before the next table is looked at.
    """
    value = doc.get(section, [])
    if not isinstance(value, list):
        raise ConfigError(f"{section}: must be an array of tables ([[{section}]])")
    for i, raw in enumerate(value):
        path = f"{section}[{i}]"
        table = _check_table(raw, path, keys)
        for key in required:
            if key not in table:
                raise ConfigError(f"{path}.{key}: missing")
        yield path, table


def _parse_listeners(doc: dict[str, Any]) -> tuple[ListenAddress, ...]:
    listeners: list[ListenAddress] = []
    for path, table in _array_of_tables(doc, "listeners", LISTENER_KEYS, ("address",)):
        try:
            address = parse_listen(table["address"])
        except ValueError as exc:
            raise ConfigError(f"{path}.address: {exc}") from None
        allow = _networks(table["allow"], f"{path}.allow") if "allow" in table else None
        md5, ao = _tcp_keys(table, path)
        tls, ssh = table.get("tls", False), table.get("ssh", False)
        if tls and ssh:
            raise ConfigError(f"{path}: a listener is either tls or ssh, not both")
        if ssh and (md5 or ao):
            raise ConfigError(f"{path}: TCP-MD5/AO keys are for TCP listeners, not ssh")
        listeners.append(
            ListenAddress(address.host, address.port, tls, allow, tcp_md5=md5, tcp_ao=ao, ssh=ssh)
        )
    return tuple(listeners)


def _tcp_keys(table: dict[str, Any], path: str) -> tuple[tuple[Md5Key, ...], tuple[AoKey, ...]]:
    """A listener's TCP-MD5 and TCP-AO keys; TCP-AO only where this kernel has it."""
    try:
        md5 = parse_md5_keys(table["tcp_md5"], f"{path}.tcp_md5") if "tcp_md5" in table else ()
        ao = parse_ao_keys(table["tcp_ao"], f"{path}.tcp_ao") if "tcp_ao" in table else ()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    both = sorted({str(k.peer) for k in md5} & {str(k.peer) for k in ao})
    if both:
        raise ConfigError(f"{path}.tcp_ao: {both[0]} also has a tcp_md5 key (one or the other)")
    if ao:
        unsupported = ao_supported()
        if unsupported is not None:
            raise ConfigError(f"{path}.tcp_ao: {unsupported}")
    return md5, ao


def _parse_ssh_users(doc: dict[str, Any]) -> tuple[SshUser, ...]:
    users: list[SshUser] = []
    required = ("name", "password_hash")
    for path, table in _array_of_tables(doc, "ssh_users", SSH_USER_KEYS, required):
        try:
            user = SshUser(table["name"], table["password_hash"])
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        if any(u.name == user.name for u in users):
            raise ConfigError(f"{path}.name: {user.name!r} already listed")
        users.append(user)
    return tuple(users)


def load_config_file(path: Path) -> FileConfig:
    """Read and check ``path``; every error names the file and the key path."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    try:
        return parse_config(text, origin=str(path))
    except ConfigError as exc:
        message = str(exc)
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        raise ConfigError(message) from None
