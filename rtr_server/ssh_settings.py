"""`SshSettings`: the host key, router keys, password users and limits of the SSH listeners.

Pure data and checks (no network): password users come only from the configuration file and
are stored as scrypt hashes (`hash_password` makes one, `verify_password` checks one in
constant time). The host key and the authorized keys file are read by `rtr_server.ssh`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SUBSYSTEM",
    "SshSettings",
    "SshUser",
    "hash_password",
    "parse_password_hash",
    "verify_password",
]

#: The SSH subsystem of RTR (RFC 6810 §7, RFC 8210 §9, 8210bis §9.1).
SUBSYSTEM = "rpki-rtr"

_SCHEME = "scrypt"
#: scrypt cost: 2**14 × 8 × 128 octets = 16 MiB and about 50 ms per check.
_N, _R, _P = 2**14, 8, 1
_MAX_N = 2**20


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``scrypt$N$r$p$SALT$HASH`` (base64) of ``password``, for ``[[ssh_users]] password_hash``."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"{_SCHEME}${_N}${_R}${_P}${_b64(salt)}${_b64(digest)}"


@dataclass(frozen=True, slots=True)
class _Hash:
    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes


def parse_password_hash(text: str) -> _Hash:
    """Check the form of a stored hash; raises ValueError saying what is wrong."""
    parts = text.split("$")
    if len(parts) != 6 or parts[0] != _SCHEME:
        raise ValueError("not an scrypt$N$r$p$SALT$HASH password hash (see rtr-serve ssh-password)")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt = base64.b64decode(parts[4], validate=True)
        digest = base64.b64decode(parts[5], validate=True)
    except ValueError:
        raise ValueError("password hash: N, r, p must be numbers, SALT and HASH base64") from None
    if not (2 <= n <= _MAX_N and n & (n - 1) == 0) or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise ValueError(f"password hash: cost out of range (N a power of 2 up to {_MAX_N})")
    if len(salt) < 8 or len(digest) < 16:
        raise ValueError("password hash: salt or hash too short")
    return _Hash(n, r, p, salt, digest)


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (a `hash_password` result); CPU-bound."""
    try:
        h = parse_password_hash(stored)
    except ValueError:
        return False
    digest = hashlib.scrypt(
        password.encode("utf-8"),
        salt=h.salt,
        n=h.n,
        r=h.r,
        p=h.p,
        dklen=len(h.digest),
        maxmem=256 * 1024 * 1024,
    )
    return hmac.compare_digest(digest, h.digest)


@dataclass(frozen=True, slots=True)
class SshUser:
    """A password user (``[[ssh_users]]`` of the configuration file)."""

    name: str
    password_hash: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an SSH user needs a name")
        parse_password_hash(self.password_hash)

    def __repr__(self) -> str:
        return f"SshUser({self.name!r}, password_hash=<hidden>)"


@dataclass(frozen=True, slots=True)
class SshSettings:
    """What the SSH listeners serve with (8210bis §9.1: publickey, no ``none``)."""

    host_key: Path
    #: OpenSSH authorized_keys file: one key per router, options such as from="..." honoured.
    authorized_keys: Path | None = None
    users: tuple[SshUser, ...] = ()
    #: User names admitted; None admits any name (the key or password decides).
    allow_users: tuple[str, ...] | None = None
    #: A connection not authenticated with its subsystem open within this many seconds is closed.
    login_timeout: float = 30.0
    #: Key exchange algorithms offered, in order (None: asyncssh's defaults).
    kex_algorithms: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.authorized_keys is None and not self.users:
            raise ValueError(
                "SSH listeners need --ssh-authorized-keys (or [[ssh_users]] in the config file)"
            )
        if self.login_timeout <= 0:
            raise ValueError("SSH login timeout must be positive")
        if self.kex_algorithms is not None and not self.kex_algorithms:
            raise ValueError("SSH key exchange algorithms: the list is empty")
        names = [u.name for u in self.users]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise ValueError(f"SSH user {name!r} listed twice")

    def user_allowed(self, name: str) -> bool:
        """Whether ``name`` may log in at all."""
        return self.allow_users is None or name in self.allow_users

    def password_hash(self, name: str) -> str | None:
        """The stored hash of password user ``name`` (None: no such user)."""
        for user in self.users:
            if user.name == name:
                return user.password_hash
        return None
