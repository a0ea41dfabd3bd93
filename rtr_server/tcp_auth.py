"""TCP-MD5 (RFC 2385) and TCP-AO (RFC 5925) keys per peer prefix on Linux listening sockets.

The keys come only from the configuration file (``[[listeners]] tcp_md5`` and ``tcp_ao``);
`parse_md5_keys` and `parse_ao_keys` check them at start (a `ValueError` naming the key path,
never the key). `bind_keyed` binds listening sockets with the keys set before ``listen``,
`apply_keys` installs them on a socket (accepted connections inherit them; the kernel drops
unsigned or wrongly signed segments from a keyed peer), `rekey` adds the
new and removes the old ones on a live listener (SIGHUP rollover). Layouts: ``struct
tcp_md5sig`` (``TCP_MD5SIG_EXT``) and ``struct tcp_ao_add`` / ``tcp_ao_del`` of the kernel's
include/uapi/linux/tcp.h (TCP-AO since Linux 6.7, needs CONFIG_TCP_AO).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AO_ALGORITHMS",
    "AoKey",
    "Md5Key",
    "TcpAuthError",
    "ao_supported",
    "apply_keys",
    "bind_keyed",
    "drain_backlog",
    "parse_ao_keys",
    "parse_md5_keys",
    "rekey",
]

TCP_MD5SIG_EXT = 32
TCP_MD5SIG_FLAG_PREFIX = 0x1
TCP_MD5SIG_MAXKEYLEN = 80
TCP_AO_ADD_KEY = 38
TCP_AO_DEL_KEY = 39
TCP_AO_MAXKEYLEN = 80
#: Algorithms by the kernel's crypto names, with the MAC length used: 96 bits, as RFC 5926
#: gives for HMAC-SHA-1-96 and AES-128-CMAC-96 (and the usual choice for hmac(sha256)).
AO_ALGORITHMS = {"hmac(sha1)": 12, "cmac(aes128)": 12, "hmac(sha256)": 12}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


NO_TCP_AO = "this kernel does not support TCP-AO (Linux >= 6.7 with CONFIG_TCP_AO is needed)"


class TcpAuthError(OSError):
    """A key could not be installed (e.g. the kernel lacks TCP-AO)."""


@dataclass(frozen=True, slots=True)
class Md5Key:
    """One TCP-MD5 key for the routers of ``peer`` (a prefix; a host is a /32 or /128)."""

    peer: Network
    key: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class AoKey:
    """One TCP-AO master key tuple for the routers of ``peer``.

    ``key_id`` is the SendID (the KeyID in our segments), ``rnext_id`` the RecvID (the KeyID the
    router signs with, announced to it as RNextKeyID).
    """

    peer: Network
    key_id: int
    rnext_id: int
    algorithm: str
    key: bytes = field(repr=False)


def _peer(value: object, path: str) -> Network:
    if not isinstance(value, str):
        raise ValueError(f"{path}.peer: must be an address or prefix string")  # noqa: TRY004
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{path}.peer: {exc}") from None


def _key(value: object, path: str, limit: int) -> bytes:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{path}.key: must be a non-empty string")
    key = value.encode()
    if len(key) > limit:
        raise ValueError(f"{path}.key: longer than {limit} bytes")
    return key


def _tables(value: object, path: str, keys: set[str]) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{path}: must be a non-empty array of {{ peer = ..., key = ... }}")
    out: list[tuple[str, dict[str, Any]]] = []
    for i, table in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(table, dict):
            raise ValueError(f"{where}: must be a table {{ peer = ..., key = ... }}")  # noqa: TRY004
        for name in sorted(set(table) - keys):
            raise ValueError(f"{where}.{name}: unknown key (known: {', '.join(sorted(keys))})")
        for name in sorted(keys - set(table)):
            raise ValueError(f"{where}.{name}: missing")
        out.append((where, table))
    return out


def parse_md5_keys(value: object, path: str) -> tuple[Md5Key, ...]:
    """``tcp_md5 = [{ peer, key }]`` to keys; raises ValueError naming the bad entry."""
    keys = tuple(
        Md5Key(_peer(t["peer"], where), _key(t["key"], where, TCP_MD5SIG_MAXKEYLEN))
        for where, t in _tables(value, path, {"peer", "key"})
    )
    _no_duplicates([(k.peer,) for k in keys], path, "peer")
    return keys


def parse_ao_keys(value: object, path: str) -> tuple[AoKey, ...]:
    """``tcp_ao = [{ peer, key_id, rnext_id, algorithm, key }]``; raises ValueError."""
    keys: list[AoKey] = []
    for where, t in _tables(value, path, {"peer", "key_id", "rnext_id", "algorithm", "key"}):
        for name in ("key_id", "rnext_id"):
            n = t[name]
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 255:
                raise ValueError(f"{where}.{name}: must be an integer in 0..255")
        if t["algorithm"] not in AO_ALGORITHMS:
            raise ValueError(
                f"{where}.algorithm: {t['algorithm']!r} is not one of {', '.join(AO_ALGORITHMS)}"
            )
        keys.append(
            AoKey(
                _peer(t["peer"], where),
                t["key_id"],
                t["rnext_id"],
                t["algorithm"],
                _key(t["key"], where, TCP_AO_MAXKEYLEN),
            )
        )
    # RFC 5925 §3.1: the IDs of the tuples of one peer must differ.
    _no_duplicates([(k.peer, k.key_id) for k in keys], path, "key_id")
    _no_duplicates([(k.peer, k.rnext_id) for k in keys], path, "rnext_id")
    return tuple(keys)


def _no_duplicates(items: list[tuple[object, ...]], path: str, what: str) -> None:
    for i, item in enumerate(items):
        if items.index(item) != i:
            raise ValueError(
                f"{path}[{i}].{what}: same as {path}[{items.index(item)}] for its peer"
            )


# ---------------------------------------------------------------------- kernel structures
def _sockaddr(peer: Network, family: int) -> bytes:
    """A ``struct __kernel_sockaddr_storage`` (128 bytes) for the prefix's address."""
    address = peer.network_address
    if family == socket.AF_INET6 and address.version == 4:
        address = ipaddress.IPv6Address(f"::ffff:{address}")  # a v4 router on a dual socket
    if address.version == 4:
        raw = struct.pack("=H", socket.AF_INET) + b"\0\0" + address.packed
    else:
        raw = struct.pack("=H", socket.AF_INET6) + b"\0\0" + b"\0" * 4 + address.packed
    return raw.ljust(128, b"\0")


def _prefixlen(peer: Network, family: int) -> int:
    """The prefix length as the kernel takes it: a v4-mapped peer keeps its IPv4 length."""
    del family
    return peer.prefixlen


def md5sig(peer: Network, key: bytes, family: int) -> bytes:
    """``struct tcp_md5sig`` with ``TCP_MD5SIG_FLAG_PREFIX``; an empty key deletes."""
    return _sockaddr(peer, family) + struct.pack(
        "=BBHi80s", TCP_MD5SIG_FLAG_PREFIX, _prefixlen(peer, family), len(key), 0, key
    )


def ao_add(key: AoKey, family: int) -> bytes:
    """``struct tcp_ao_add`` (288 bytes) for ``key``."""
    raw = _sockaddr(key.peer, family) + struct.pack(
        "=64siIHBBBBBB80s",
        key.algorithm.encode(),
        0,  # ifindex
        0,  # set_current, set_rnext: the kernel picks the first key of a peer
        0,
        _prefixlen(key.peer, family),
        key.key_id,
        key.rnext_id,
        AO_ALGORITHMS[key.algorithm],
        0,  # keyflags
        len(key.key),
        key.key,
    )
    return raw.ljust(288, b"\0")


def ao_del(key: AoKey, family: int) -> bytes:
    """``struct tcp_ao_del`` (144 bytes) for ``key``."""
    raw = _sockaddr(key.peer, family) + struct.pack(
        "=iIHBBBBBB", 0, 0, 0, _prefixlen(key.peer, family), key.key_id, key.rnext_id, 0, 0, 0
    )
    return raw.ljust(144, b"\0")


# ---------------------------------------------------------------------- sockets
def _family_fits(peer: Network, family: int) -> bool:
    return family == socket.AF_INET6 or peer.version == 4


def _set(sock: socket.socket, option: int, value: bytes, what: str) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, option, value)
    except OSError as exc:
        if exc.errno == errno.ENOPROTOOPT and option in (TCP_AO_ADD_KEY, TCP_AO_DEL_KEY):
            raise TcpAuthError(exc.errno, f"{what}: {NO_TCP_AO}") from None
        raise TcpAuthError(exc.errno, f"{what}: {exc.strerror}") from None


def apply_keys(
    sock: socket.socket, md5: Sequence[Md5Key], ao: Sequence[AoKey], *, remove: bool = False
) -> None:
    """Install (or with ``remove`` delete) the keys on ``sock``; raises `TcpAuthError`."""
    family = sock.family
    for m in md5:
        if _family_fits(m.peer, family):
            value = md5sig(m.peer, b"" if remove else m.key, family)
            _set(sock, TCP_MD5SIG_EXT, value, f"TCP-MD5 key for {m.peer}")
    for a in ao:
        if _family_fits(a.peer, family):
            option, value = (
                (TCP_AO_DEL_KEY, ao_del(a, family))
                if remove
                else (TCP_AO_ADD_KEY, ao_add(a, family))
            )
            _set(sock, option, value, f"TCP-AO key {a.key_id}/{a.rnext_id} for {a.peer}")


def bind_keyed(
    host: str, port: int, md5: Sequence[Md5Key], ao: Sequence[AoKey]
) -> list[socket.socket]:
    """Listening sockets for ``host``:``port`` whose keys are set between bind and listen.

    So no router of a keyed prefix can connect unsigned in the moment after ``listen``. One
    socket per address family of ``host`` (``::`` alone: one dual-stack socket).
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    addresses = list(dict.fromkeys((info[0], info[4]) for info in infos))
    families = {family for family, _ in addresses}
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, len(families) > 1)
            sock.bind(address)
            apply_keys(sock, md5, ao)
            sock.listen(65535)
            sock.settimeout(0.0)  # non-blocking, as the event loop needs it
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def drain_backlog(
    sock: socket.socket, md5: Sequence[Md5Key], ao: Sequence[AoKey]
) -> tuple[list[socket.socket], int]:
    """Take what waits in an inherited listener's backlog once its keys are set.

    Those connections were made before the keys existed, so the kernel checked nothing: the
    ones from keyed prefixes are closed (they reconnect, signed); the others are returned to be
    served. Returns (kept connections, number closed).
    """
    keyed = [k.peer for k in md5] + [k.peer for k in ao]
    waiting: list[tuple[socket.socket, Any]] = []
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        while True:  # all of them first: a router told "closed" reconnects after the drain
            try:
                waiting.append(sock.accept())
            except (BlockingIOError, InterruptedError):
                break
    finally:
        sock.settimeout(timeout)
    kept: list[socket.socket] = []
    closed = 0
    for conn, address in waiting:
        peer = ipaddress.ip_address(address[0])
        if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
            peer = peer.ipv4_mapped
        if any(peer.version == net.version and peer in net for net in keyed):
            conn.close()
            closed += 1
        else:
            conn.settimeout(0.0)
            kept.append(conn)
    return kept, closed


def rekey(
    sock: socket.socket,
    old: tuple[Sequence[Md5Key], Sequence[AoKey]],
    new: tuple[Sequence[Md5Key], Sequence[AoKey]],
) -> list[str]:
    """Add the keys only in ``new``, then remove those only in ``old``; what changed (no keys).

    MD5 keys are per peer prefix: a changed key for the same prefix replaces the old one.
    """
    old_md5, old_ao = old
    new_md5, new_ao = new
    added_md5 = [k for k in new_md5 if k not in old_md5]
    removed_md5 = [
        k for k in old_md5 if k not in new_md5 and k.peer not in {n.peer for n in new_md5}
    ]
    added_ao = [k for k in new_ao if k not in old_ao]
    removed_ao = [k for k in old_ao if k not in new_ao]
    apply_keys(sock, added_md5, added_ao)
    apply_keys(sock, removed_md5, removed_ao, remove=True)
    changes = [f"TCP-MD5 key for {k.peer} set" for k in added_md5]
    changes += [f"TCP-MD5 key for {k.peer} removed" for k in removed_md5]
    changes += [f"TCP-AO key {k.key_id}/{k.rnext_id} for {k.peer} added" for k in added_ao]
    changes += [f"TCP-AO key {k.key_id}/{k.rnext_id} for {k.peer} removed" for k in removed_ao]
    return changes


def ao_supported() -> str | None:
    """None when this kernel takes TCP-AO keys, else why not (checked on an unbound socket)."""
    probe = AoKey(ipaddress.ip_network("127.0.0.1/32"), 1, 1, "hmac(sha256)", b"probe")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            apply_keys(sock, (), (probe,))
        except TcpAuthError as exc:
            if exc.errno == errno.ENOPROTOOPT:
                return NO_TCP_AO
            return f"TCP-AO is unusable here: {os.strerror(exc.errno or 0)}"
    return None
