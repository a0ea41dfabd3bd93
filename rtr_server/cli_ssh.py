"""The SSH options of ``rtr-serve``, their check into `SshSettings`, and ``rtr-serve ssh-password``.

`add_ssh_options` adds ``--listen-ssh``, ``--ssh-host-key``, ``--ssh-authorized-keys``,
``--ssh-allow-user``, ``--ssh-login-timeout`` and ``--ssh-kex-algorithms`` to the parser;
`ssh_settings` checks them (key files read once, algorithm names against asyncssh's,
the asyncio backend required) and raises ValueError with one line.
Password users exist only in the configuration file (``[[ssh_users]]``, scrypt hashes made by
``rtr-serve ssh-password``).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rtr_server.settings import ListenAddress
from rtr_server.ssh_settings import SshSettings, SshUser, hash_password

__all__ = ["KEX_WHY", "add_ssh_options", "kex_algorithms", "password_main", "ssh_settings"]

#: Why Debian 12's RTRlib routers need --ssh-kex-algorithms (README "Transports").
KEX_WHY = (
    "FRR's libfrr exports its own SHA256_Init/Update/Final, which take the place of OpenSSL's "
    "inside bgpd, so every SHA-256 libssh computes there is wrong: the SHA-256 key exchanges "
    "(curve25519-sha256, ecdh-sha2-nistp256, diffie-hellman-group14-sha256) derive wrong keys "
    "and the first encrypted packet fails (asyncssh: 'Max packet size exceeded'); the "
    "SHA-384/512 ones (ecdh-sha2-nistp384, -nistp521) work, with ed25519 host and router keys "
    "(signed with SHA-512)"
)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def kex_algorithms(names: Sequence[str], option: str) -> tuple[str, ...]:
    """``names`` checked against asyncssh's key exchange algorithms; ValueError, one line."""
    if not names:
        raise ValueError(f"{option}: no key exchange algorithm given")
    import asyncssh  # only when SSH is configured: serving without it skips the import
    from asyncssh import kex as asyncssh_kex

    known = {alg.decode("ascii") for alg in asyncssh_kex.get_kex_algs()}
    for name in names:
        if name not in known:
            raise ValueError(
                f"{option}: unknown SSH key exchange algorithm {name!r} (asyncssh "
                f"{asyncssh.__version__} knows {len(known)}, e.g. curve25519-sha256, "
                "ecdh-sha2-nistp256, ecdh-sha2-nistp384, diffie-hellman-group14-sha256)"
            )
    return tuple(names)


def add_ssh_options(parser: Any) -> None:
    """Add the SSH group to ``parser`` (a `rtr_server.cli_args.OptionParser`)."""
    ssh = parser.add_argument_group(
        "RTR over SSH (asyncio backend only)",
        "Routers log in with a key from --ssh-authorized-keys (or a password user of the "
        "config file's [[ssh_users]]) and open the rpki-rtr subsystem; shell, exec and "
        "forwarding are refused. Same limits, --allow networks and timeouts as TCP.",
    )
    parser.option(
        ssh,
        "--listen-ssh",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="address to serve RTR over SSH on (8210bis §9.1, subsystem rpki-rtr); repeat "
        "for several; needs --ssh-host-key and --ssh-authorized-keys",
    )
    parser.option(
        ssh,
        "--ssh-host-key",
        type=Path,
        metavar="FILE",
        help="the cache's SSH host private key (OpenSSH or PEM, unencrypted; e.g. from "
        "ssh-keygen -t ed25519); routers pin its public key in their known_hosts",
    )
    parser.option(
        ssh,
        "--ssh-authorized-keys",
        type=Path,
        metavar="FILE",
        help="OpenSSH authorized_keys file with one public key per router; options such as "
        'from="192.0.2.0/24" are honoured; read at start',
    )
    parser.option(
        ssh,
        "--ssh-allow-user",
        action="append",
        default=[],
        metavar="NAME",
        help="admit only these SSH user names; repeat for several (default: any name, the "
        "key or password decides)",
    )
    parser.option(
        ssh,
        "--ssh-login-timeout",
        type=_positive,
        default=30.0,
        metavar="S",
        help="close an SSH connection not logged in with the rpki-rtr subsystem open within "
        "S seconds (default 30)",
    )
    parser.option(
        ssh,
        "--ssh-kex-algorithms",
        type=_name_list,
        metavar="LIST",
        help="comma-separated key exchange algorithms to offer, e.g. ecdh-sha2-nistp384 "
        "(default: asyncssh's list). FRR 8.4 (Debian 12, RTRlib 0.8 with libssh 0.10) "
        "needs ecdh-sha2-nistp384: " + KEX_WHY,
    )


def ssh_settings(
    args: argparse.Namespace,
    listen: Sequence[ListenAddress],
    users: Sequence[SshUser],
    *,
    activated: bool = False,
) -> SshSettings | None:
    """The checked SSH settings (None without SSH listeners); raises ValueError, one line.

    ``activated``: systemd passed an ``rtr-ssh`` socket (it needs the same settings).
    """
    config = args.config is not None

    def name(key: str) -> str:
        return f"server.{key}" if config else f"--{key.replace('_', '-')}"

    kex = None
    if args.ssh_kex_algorithms is not None:
        kex = kex_algorithms(args.ssh_kex_algorithms, name("ssh_kex_algorithms"))
    if not activated and not any(a.ssh for a in listen):
        return None
    if args.ssh_host_key is None:
        what = "an rtr-ssh socket from systemd needs" if activated else "SSH listeners need"
        raise ValueError(f"{what} {name('ssh_host_key')}")
    if getattr(args, "async_backend", "asyncio") != "asyncio":
        raise ValueError(
            "SSH listeners need the asyncio backend (asyncssh runs on asyncio only); "
            f"drop {name('async_backend')} trio"
        )
    try:
        settings = SshSettings(
            host_key=args.ssh_host_key,
            authorized_keys=args.ssh_authorized_keys,
            users=tuple(users),
            allow_users=tuple(args.ssh_allow_user) or None,
            login_timeout=args.ssh_login_timeout,
            kex_algorithms=kex,
        )
    except ValueError as exc:
        message = str(exc).replace("--ssh-authorized-keys", name("ssh_authorized_keys"))
        raise ValueError(message) from None
    from rtr_server.ssh import load_ssh_keys  # asyncssh, only when SSH is configured

    load_ssh_keys(settings)  # an unusable key file is a configuration error now
    return settings


def password_main(argv: Sequence[str]) -> int:
    """``rtr-serve ssh-password [USER]``: print an ``[[ssh_users]]`` entry for a password."""
    parser = argparse.ArgumentParser(
        prog="rtr-serve ssh-password",
        description="Read a password (twice from a terminal, once from a pipe) and print an "
        "[[ssh_users]] table with its scrypt hash for the configuration file.",
    )
    parser.add_argument("user", nargs="?", default="rtr", help="SSH user name (default rtr)")
    args = parser.parse_args(list(argv))
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            sys.stderr.write("rtr-serve ssh-password: the passwords differ\n")
            return 2
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        sys.stderr.write("rtr-serve ssh-password: empty password\n")
        return 2
    sys.stdout.write(
        f'[[ssh_users]]\nname = "{args.user}"\npassword_hash = "{hash_password(password)}"\n'
    )
    return 0
