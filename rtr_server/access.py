"""Router access control: allowed networks per listener, and a rate limit for refusal logs.

Pure: no sockets and no clock (callers pass ``now``). An IPv4 router reaching a dual-stack
``[::]`` listener shows up as ``::ffff:a.b.c.d``; it is judged (and logged) as ``a.b.c.d``, so
``192.0.2.0/24`` admits it there too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_network(text: str) -> Network:
    """``192.0.2.0/24``, ``2001:db8::/32`` or a bare address (one host); raises ValueError.

    Host bits must be zero (``192.0.2.1/24`` is refused): such a typo would otherwise
    silently admit a whole network the operator did not name.
    """
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a network ({exc})") from None


def parse_networks(texts: Iterable[str]) -> tuple[Network, ...]:
    """Every entry of ``texts`` as a network (raises ValueError naming the bad one)."""
    return tuple(parse_network(t) for t in texts)


def peer_address(text: str) -> Address | None:
    """The router's address from a socket's peer name, IPv4-mapped IPv6 unwrapped.

    None when the text is not an IP address.
    """
    try:
        address = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_allowed(peer_ip: str, allow: tuple[Network, ...] | None) -> bool:
    """True when ``allow`` is None (no restriction) or one of its networks holds ``peer_ip``.

    An address that cannot be parsed is refused whenever a restriction is set.
    """
    if allow is None:
        return True
    address = peer_address(peer_ip)
    if address is None:
        return False
    return any(address.version == net.version and address in net for net in allow)


@dataclass(slots=True)
class LogRateLimit:
    """At most ``burst`` log lines per ``interval`` seconds per key; the rest are counted.

    Keys are few (a listener and a kind of refusal), never per router address: a flood from
    many addresses must not get a line each.

    `allow` says whether to log now and how many lines were suppressed since the last
    logged one (so a flood costs a few lines, and the next line says how many were dropped).
    """

    interval: float = 10.0
    burst: int = 5
    _windows: dict[str, tuple[float, int, int]] = field(default_factory=dict)

    def allow(self, key: str, now: float) -> tuple[bool, int]:
        """(log this one?, lines suppressed before it) for an event of ``key`` at ``now``."""
        start, logged, suppressed = self._windows.get(key, (now, 0, 0))
        if now - start >= self.interval:
            start, logged = now, 0
        if logged < self.burst:
            self._windows[key] = (start, logged + 1, 0)
            return True, suppressed
        self._windows[key] = (start, logged, suppressed + 1)
        return False, suppressed + 1
