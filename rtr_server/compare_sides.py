"""One side of ``rtr-serve compare``: an RTR cache or a JSON export (file or URL), read once.

A cache is read as a router with `upstream.router_fetch` (full table, version negotiated from
2); an export is read whole (gzip/bzip2/xz recognised), parsed by
`upstream.json_format.parse_export` and evaluated for expiry at the time it was read (or at a
fixed reference time, for old exports); the entries that expired are counted. Every failure is
a `SideError` with one line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx

from snapshot.snapshot import Snapshot
from upstream.decompress import decompress
from upstream.format_error import FormatError
from upstream.json_format import parse_export
from upstream.router_fetch import CacheAddress, FetchError, fetch, parse_cache_url

__all__ = ["MAX_EXPORT_BYTES", "Side", "SideError", "SideState", "parse_side"]

#: The largest export read (compressed or not), like the HTTP source's default size cap.
MAX_EXPORT_BYTES = 256 * 1024 * 1024


class SideError(Exception):
    """A side could not be read; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class SideState:
    """What one side held when it was read."""

    snapshot: Snapshot
    #: Unix time of the read.
    read_at: float
    #: The cache's serial (None for an export).
    serial: int | None = None
    #: The cache's session id (None for an export).
    session_id: int | None = None
    #: The protocol version the cache answered at (None for an export).
    version: int | None = None
    #: The export's own generation time (metadata buildtime), when it has one.
    generated: int | None = None
    #: Export entries left out because they had expired at the evaluation time.
    expired: int = 0


@dataclass(frozen=True, slots=True)
class Side:
    """Where a side is: a cache (``address``) or an export (``location``)."""

    label: str
    address: CacheAddress | None = None
    location: str | None = None

    async def read(self, within: float, reference_time: float | None = None) -> SideState:
        """Read the side once within ``within`` seconds.

        An export is evaluated for expiry at ``reference_time`` (Unix seconds), or now.

        Raises:
            SideError: with one line saying why it could not be read.
        """
        if self.address is not None:
            try:
                result = await fetch(self.address, within=within)
            except FetchError as exc:
                raise SideError(f"{self.label}: {exc}") from None
            assert result.snapshot is not None
            return SideState(
                result.snapshot,
                time.time(),
                serial=result.serial,
                session_id=result.session_id,
                version=result.version,
            )
        assert self.location is not None
        raw = await self._read_bytes(within)
        now = time.time()
        try:
            payload = parse_export(decompress(raw, MAX_EXPORT_BYTES))
        except (FormatError, ValueError, OSError, EOFError) as exc:
            raise SideError(f"{self.label}: not a usable export: {exc}") from None
        at = int(now if reference_time is None else reference_time)
        snapshot = payload.snapshot_at(at)
        held = sum(payload.counts().values())
        expired = max(0, held - _records(snapshot))
        return SideState(snapshot, now, generated=payload.generated, expired=expired)

    async def _read_bytes(self, within: float) -> bytes:
        location = self.location
        assert location is not None
        if urlsplit(location).scheme in ("http", "https"):
            return await self._download(location, within)
        path = anyio.Path(location)
        try:
            if (await path.stat()).st_size > MAX_EXPORT_BYTES:
                raise SideError(f"{self.label}: larger than {MAX_EXPORT_BYTES} bytes")
            return await path.read_bytes()
        except OSError as exc:
            raise SideError(f"{self.label}: cannot read: {exc.strerror or exc}") from None

    async def _download(self, url: str, within: float) -> bytes:
        """GET ``url`` (redirects followed), at most `MAX_EXPORT_BYTES`, within ``within`` s."""
        body = bytearray()
        too_big = f"{self.label}: larger than {MAX_EXPORT_BYTES} bytes"
        try:
            with anyio.fail_after(within):
                async with (
                    httpx.AsyncClient(timeout=within, follow_redirects=True) as client,
                    client.stream("GET", url) as response,
                ):
                    if response.status_code != 200:
                        raise SideError(f"{self.label}: HTTP {response.status_code}")
                    length = response.headers.get("content-length", "")
                    if length.isdigit() and int(length) > MAX_EXPORT_BYTES:
                        raise SideError(too_big)
                    # Past the bound the rest is drained, not kept (stopping inside httpx's
                    # stream leaves its generators to the garbage collector), within `within`.
                    async for chunk in response.aiter_bytes():
                        if len(body) <= MAX_EXPORT_BYTES:
                            body += chunk
            if len(body) > MAX_EXPORT_BYTES:
                raise SideError(too_big)
        except TimeoutError:
            raise SideError(f"{self.label}: not read within {within:g} s") from None
        except httpx.HTTPError as exc:
            raise SideError(f"{self.label}: {exc!r}") from None
        return bytes(body)


def _records(snapshot: Snapshot) -> int:
    return snapshot.vrp_count + len(snapshot.aspas) + len(snapshot.router_keys)


def parse_side(text: str) -> Side:
    """``rtr://…`` / ``rtrs://…`` (a cache), ``http(s)://…`` or a path (an export); no I/O.

    Raises:
        ValueError: for a malformed cache URL, another URL scheme, or an empty argument.
    """
    scheme = urlsplit(text).scheme
    if scheme in ("rtr", "rtrs"):
        return Side(text, address=parse_cache_url(text))
    if scheme in ("http", "https"):
        return Side(text, location=text)
    if "://" in text:
        raise ValueError(f"{text!r}: expected rtr://, rtrs://, http(s):// or a file path")
    if not text:
        raise ValueError("an empty side")
    return Side(text, location=str(Path(text)))
