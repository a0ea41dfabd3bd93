"""A JSON export fetched over HTTP(S), polled with conditional requests, parsed off the loop.

Contract:

* **Configuration before I/O.** `parse_http_url` and the `HttpSource` constructor raise
  `ValueError` for a URL that can never work (scheme other than http/https, no host, a port
  outside 1–65535, credentials in the URL, blanks or control characters) and for bad options;
  neither touches the network.
* **Conditional polling.** Each poll sends ``If-None-Match`` / ``If-Modified-Since`` with the
  validators of the last complete response. A ``304``, or a ``200`` whose body (after undoing any
  Content-Encoding) has the SHA-256 of the content in force, delivers nothing: no expiry is
  refreshed, no trust is restored, the poll is only recorded in `status`. An export whose
  stated build time lies beyond the raw wall clock plus the clock tolerance is held back
  (class ``time``) and admitted once the wall clock allows it.
* **Refreshing.** The source can refresh (`HttpSource.refreshing`) while its last poll
  succeeded (a 200 with a valid body, or a 304/identical body for data in force); a failed
  fetch, an error status or a rejected body ends that until the next success.
* **Bounded work.** The body is streamed and counted as it arrives; more than ``max_bytes`` raw
  bytes, more than ``max_bytes`` after undoing gzip/deflate Content-Encoding, or more than
  ``max_bytes`` after undoing a gzip/bzip2/xz body (in the worker thread) aborts the update.
  Connect and read timeouts apply per operation, ``total_timeout`` to the whole exchange
  (redirects and body included). Decompression of the body and `parse_export` run in a worker
  thread.
* **Failure classes** (``status.errors`` keys, also named in the log line):

  ``environment``
      the network, TLS, a timeout, ``5xx``, ``408`` or ``429``: retried with exponential backoff
      and jitter (``retry_initial`` · 2ⁿ, capped at ``retry_max``, at least a ``Retry-After``),
      reset by the next success;
  ``http``
      any other unexpected status (``4xx``, a redirect loop, an unsupported Content-Encoding):
      the publisher's or operator's problem, retried at ``poll_interval``;
  ``size``
      the body exceeds ``max_bytes``; retried at ``poll_interval``;
  ``format``
      the body is not a valid export: this update is rejected with the reason and the data in
      force stays (nothing is emitted); the same bytes are not parsed again.

* **Secrets.** ``headers`` (an auth token, say) are sent only to the origin of the configured
  URL — dropped when a redirect leads elsewhere — and never appear in logs, error messages,
  `status` or ``repr``.
* **Redirects** are followed (at most `MAX_REDIRECTS`), never from https to plain http.
* **Ownership.** `run` creates its `httpx.AsyncClient` and closes it when it ends, cancelled or
  not; an injected ``client`` belongs to the caller and is never closed here (its TLS and proxy
  settings then apply; timeouts and headers are still set per request). Every response is
  closed on every path: success, error, size limit and cancellation. With the owned client the
  whole request runs in a managed worker task (`upstream.http_exchange.in_worker`), its response
  is closed in a shielded child task, then its raw iterator is unrolled and closed
  (`upstream.http_exchange.ResponseHolder`), and its connections, direct or through the
  environment's proxies (read by `prepare`), go through `upstream.http_network.OwnedTransport`
  (a cancelled TLS handshake closes its socket). A close error never replaces the original
  failure or cancellation; a cancelled poll is no failure.
* **Byte quota.** `quota`, the source's lease on a `upstream.http_budget.ByteBudget` shared
  with the other sources of its owner (``budget``, or `use_budget`), holds the body bytes a poll
  buffered until its cleanup and the parse ended (`upstream.http_budget`: a poll that holds
  nothing waits for room, one that holds bytes fails ``environment`` when there is none, a
  body that can never fit fails ``size``); no partial body is ever parsed or emitted.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import anyio
import httpx

from snapshot.backoff import jittered_backoff
from snapshot.kinds import ALL_KINDS, PayloadKind
from upstream.clock import Clock
from upstream.http_body import (
    Parsed,
    PollError,
    Response,
    describe,
    digest_and_parse,
    read_body,
)
from upstream.http_budget import BudgetExhaustedError, ByteBudget, ByteQuota
from upstream.http_exchange import ResponseHolder, in_worker
from upstream.http_network import owned_client, proxy_map
from upstream.http_replies import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    redirect_target,
    status_failure,
)
from upstream.http_rules import (
    SecretHeaders,
    default_ssl_context,
    origin_of,
    parse_http_url,
    user_agent,
)
from upstream.json_format import DEFAULT_MAX_ASPA_PROVIDERS
from upstream.pieces import PieceMemo
from upstream.source import (
    DeliverySink,
    HeldExport,
    HoldsExports,
    SourceSetupError,
)
from upstream.status import SourceState, SourceStatus
from upstream.timekeeper import as_keeper

log = logging.getLogger(__name__)

#: Default cap on the body, raw and decoded (real full exports are 60–80 MB of JSON).
DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024


class HttpSource(HoldsExports):
    """Polls one URL every ``poll_interval`` seconds and emits each new valid payload."""

    kind = "http"
    _log = log
    #: Its data comes from a live upstream: distrusted after a clock jump.
    online = True
    #: An export can hold every kind.
    capabilities: frozenset[PayloadKind] = ALL_KINDS

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        poll_interval: float = 10.0,
        max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS,
        clock: Clock | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        connect_timeout: float = 10.0,
        read_timeout: float = 30.0,
        total_timeout: float = 120.0,
        ca_file: str | Path | None = None,
        verify: bool = True,
        headers: Mapping[str, str] | None = None,
        retry_initial: float = 1.0,
        retry_max: float = 300.0,
        client: httpx.AsyncClient | None = None,
        budget: ByteBudget | None = None,
    ) -> None:
        """Check the configuration (`ValueError` when it can never work); no I/O at all.

        ``ca_file`` (PEM) replaces the default trust store; it is read by `prepare` (which
        the `Client` awaits on entering, and `run` and `check` before their first request),
        so a missing or broken file is reported before any network activity. ``client``, if
        given, is used and never closed. ``budget`` is the byte budget shared with the other
        sources of the owner (a budget of its own of ``max_bytes`` when not given).
        """
        self.url = parse_http_url(url)
        for option, value in (
            ("poll_interval", poll_interval),
            ("connect_timeout", connect_timeout),
            ("read_timeout", read_timeout),
            ("total_timeout", total_timeout),
            ("retry_initial", retry_initial),
            ("max_bytes", max_bytes),
        ):
            if not value > 0:
                raise ValueError(f"{option} must be positive")
        if not retry_max >= retry_initial:
            raise ValueError("retry_max must not be below retry_initial")
        self.name = name or url
        self.poll_interval = poll_interval
        self.max_aspa_providers = max_aspa_providers
        self.keeper = as_keeper(clock)
        self.clock: Clock = self.keeper
        self.max_bytes = max_bytes
        self.total_timeout = total_timeout
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.timeout = httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        )
        self._headers = SecretHeaders(headers)
        self._origin = origin_of(self.url)
        #: The TLS verification of the requests; None until `prepare` loaded the trust store.
        self._verify: ssl.SSLContext | bool | None = None
        self._ca_file = None if ca_file is None else Path(ca_file)
        if not verify:
            if ca_file is not None:
                raise ValueError("ca_file is useless with verify=False")
            self._verify = False
            log.warning("source %s: TLS certificates are NOT verified", self.name)
        self._client = client
        self.status = SourceStatus(self.name, self.kind, str(self.url))
        #: Consecutive environment failures (the backoff exponent); reset by any other outcome.
        self.failures = 0
        #: The wait before the next poll chosen by `run` (poll_interval, or a backoff delay).
        self.next_delay: float | None = None
        # Validators of the last complete response, accepted or rejected.
        self._etag: str | None = None
        self._last_modified: str | None = None
        self._last_rejected = False
        self._digest: bytes | None = None
        self._rejected_digest: bytes | None = None
        #: A valid export held back because its build time is ahead of the wall clock.
        self._held: HeldExport | None = None
        #: The pieces of the last export read: the next read decodes only the changed ones.
        self._memo = PieceMemo()
        self._wake: anyio.Event | None = None
        #: The environment's proxies (`proxy_map`), read by `prepare`.
        self._proxies: dict[str, httpx.Proxy | None] | None = None
        #: The body bytes the current poll buffered, held until its cleanup and parse ended.
        self.quota = ByteQuota(limit=max_bytes)
        if budget is not None:
            self.use_budget(budget)
        self._lease = self.quota

    def __repr__(self) -> str:
        return f"HttpSource(name={self.name!r}, url={str(self.url)!r})"

    def use_budget(self, budget: ByteBudget) -> None:
        """Count the next polls' body bytes in ``budget`` (grown to hold ``max_bytes``)."""
        budget.cover(self.max_bytes)
        if self.quota.budget is not budget:
            self.quota = budget.quota()

    def refreshing(self) -> bool:
        """True before the first poll and while the last poll succeeded."""
        return not self.status.attempted or self.status.state is SourceState.OK

    def resync(self) -> None:
        """Poll now instead of at the end of the current wait."""
        if self._wake is not None:
            self._wake.set()

    async def run(self, sink: DeliverySink) -> None:
        """Poll forever (until cancelled), calling ``sink`` with each new delivery."""
        async with self._client_scope() as client:
            while True:
                _, failure = await self._poll(client, sink)
                if failure is None:
                    self.failures = 0
                    delay = self.poll_interval
                else:
                    delay = self._backoff(failure)
                    self.failures += 1
                    log.warning(
                        "source %s: cannot fetch %s: %s; retry in %.2f s",
                        self.name,
                        self.url,
                        failure.message,
                        delay,
                    )
                self.next_delay = delay
                self._wake = anyio.Event()
                with anyio.move_on_after(delay):
                    await self._wake.wait()
                self._wake = None

    async def check(self, sink: DeliverySink) -> bool:
        """One poll (with a client of its own unless one was injected); True when emitted.

        Not to be called while `run` is running.
        """
        async with self._client_scope() as client:
            emitted, failure = await self._poll(client, sink)
        if failure is not None:
            log.warning("source %s: cannot fetch %s: %s", self.name, self.url, failure.message)
        return emitted

    async def prepare(self) -> None:
        """Load the trust store (``ca_file`` or the default) in a worker thread, once.

        The environment's proxies are read and checked here too (`proxy_map`). Raises
        `SourceSetupError` (a `ValueError`) when the CA file or a proxy cannot be used; calling
        again after that retries.
        """
        if self._verify is None:
            self._verify = await anyio.to_thread.run_sync(self._load_trust)
        if self._proxies is None and self._client is None:
            self._proxies = proxy_map()

    def _load_trust(self) -> ssl.SSLContext:
        if self._ca_file is None:
            return default_ssl_context()
        try:
            return ssl.create_default_context(cafile=str(self._ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise SourceSetupError(f"cannot use CA file {self._ca_file}: {exc}") from None

    def _make_client(self) -> httpx.AsyncClient:
        """The client `run` owns: every connection, direct or proxied, an owned one."""
        assert self._verify is not None, "prepare() loads the trust store first"
        assert self._proxies is not None, "prepare() reads the proxies first"
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
        return owned_client(
            verify=self._verify, timeout=self.timeout, limits=limits, proxies=self._proxies
        )

    @asynccontextmanager
    async def _client_scope(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        await self.prepare()
        client = self._make_client()
        try:
            yield client
        finally:
            await in_worker(lambda: _close_shielded(client))

    def _backoff(self, failure: PollError) -> float:
        delay = jittered_backoff(self.failures, self.retry_initial, self.retry_max)
        if failure.retry_after is not None:
            delay = max(delay, min(failure.retry_after, self.retry_max))
        return delay

    # ------------------------------------------------------------ one poll

    async def _poll(
        self, client: httpx.AsyncClient, sink: DeliverySink
    ) -> tuple[bool, PollError | None]:
        """(emitted, the environment failure to retry soon, if any)."""
        self._lease = lease = self.quota
        try:
            return await self._poll_once(client, sink)
        finally:
            lease.release()

    async def _poll_once(
        self, client: httpx.AsyncClient, sink: DeliverySink
    ) -> tuple[bool, PollError | None]:
        started = self.clock.monotonic()
        try:
            try:
                with anyio.fail_after(self.total_timeout):
                    response = await self._fetch(client)
            except TimeoutError:
                raise PollError(
                    "environment", f"no complete response within {self.total_timeout:g} s"
                ) from None
            except (httpx.HTTPError, OSError) as exc:
                raise PollError("environment", describe(exc)) from None
        except PollError as failure:
            self._failed(failure)
            if failure.error_class == "environment":
                return False, failure
            log.error(
                "source %s: no update from %s (%s): %s; the previous data stays in force",
                self.name,
                self.url,
                failure.error_class,
                failure.message,
            )
            return False, None
        if response.status == 304:
            self._not_modified(response)
            return self._admit_held(sink), None
        assert response.chunks is not None
        parsed = await anyio.to_thread.run_sync(
            digest_and_parse,
            response.chunks,
            (self._digest, self._rejected_digest),
            self.max_bytes,
            self.max_aspa_providers,
            self._memo,
        )
        self._etag, self._last_modified = response.etag, response.last_modified
        return self._evaluated(response, parsed, started, sink), None

    async def _fetch(self, client: httpx.AsyncClient) -> Response:
        """The exchange; with the owned client in a managed worker task (`in_worker`)."""
        if self._client is None:
            return await in_worker(lambda: self._exchange(client))
        return await self._exchange(client)

    async def _exchange(self, client: httpx.AsyncClient) -> Response:
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            request = client.build_request(
                "GET", url, headers=self._request_headers(url), timeout=self.timeout
            )
            response = await client.send(request, stream=True, follow_redirects=False)
            holder = ResponseHolder(response, built_in=self._client is None, name=self.name)
            try:
                code = response.status_code
                if code in REDIRECT_STATUSES:
                    url = redirect_target(url, response, self.name)
                    continue
                if code == 304:
                    return Response(
                        304,
                        response.headers.get("etag"),
                        response.headers.get("last-modified"),
                    )
                if code != 200:
                    raise status_failure(response, self.clock.wall())
                return await read_body(response, holder.raw, self.max_bytes, self._count)
            finally:
                await holder.release()
        raise PollError("http", f"more than {MAX_REDIRECTS} redirects")

    def _request_headers(self, url: httpx.URL) -> dict[str, str]:
        headers = {
            "User-Agent": user_agent(),
            "Accept": "application/json, */*;q=0.5",
            "Accept-Encoding": "gzip, deflate",
        }
        if self._etag is not None:
            headers["If-None-Match"] = self._etag
        if self._last_modified is not None:
            headers["If-Modified-Since"] = self._last_modified
        if origin_of(url) == self._origin:
            headers.update(self._headers.items)
        return headers

    async def _count(self, raw: int) -> None:
        self.status.bytes_read += raw
        try:
            await self._lease.take(raw)
        except BudgetExhaustedError as exc:
            raise PollError("size" if exc.never_fits else "environment", str(exc)) from None

    # ------------------------------------------------------------ status updates

    def _failed(self, failure: PollError) -> None:
        """Record ``failure`` in `status`, its message scrubbed of the secret header values."""
        failure.message = self._headers.scrub(failure.message)
        self.status.failed(failure.error_class, failure.message, self.clock.wall())

    def _not_modified(self, response: Response) -> None:
        if response.etag is not None:
            self._etag = response.etag
        if response.last_modified is not None:
            self._last_modified = response.last_modified
        self._unchanged("not modified")

    def _unchanged(self, how: str) -> None:
        status = self.status
        status.attempted = True
        if not self._last_rejected:
            status.syncs += 1
        if self._last_rejected:
            status.state = SourceState.ERROR
            log.debug("source %s: %s %s; still the rejected update", self.name, self.url, how)
        elif status.state is not SourceState.OK and self._digest is not None:
            status.state = SourceState.OK
            log.info("source %s: %s %s; back to the data in force", self.name, self.url, how)
        else:
            log.debug("source %s: %s %s", self.name, self.url, how)

    def _evaluated(
        self, response: Response, parsed: Parsed, started: float, sink: DeliverySink
    ) -> bool:
        if parsed.failure is not None:
            self._last_rejected = True
            self._rejected_digest = parsed.digest
            failure = parsed.failure
            self._failed(failure)
            log.error(
                "source %s: rejected update from %s (%s): %s; the previous data stays in force",
                self.name,
                self.url,
                failure.error_class,
                failure.message,
            )
            return False
        if parsed.delivery is None:
            self._last_rejected = parsed.digest == self._rejected_digest
            if not self._last_rejected:
                self._rejected_digest = None
            self._unchanged("content unchanged")
            return self._admit_held(sink)
        self._rejected_digest = None
        self._last_rejected = False
        encoded = "" if response.size == response.raw_bytes else f", {response.raw_bytes} encoded"
        how = f" ({response.size} bytes{encoded}) in {self.clock.monotonic() - started:.2f} s"
        self._held = HeldExport(parsed.digest, parsed.delivery, how)
        return self._admit_held(sink)

    def _location(self) -> str:
        return str(self.url)


async def _close_shielded(client: httpx.AsyncClient) -> None:
    """Close the owned client's pool (in `in_worker`: a native cancel cannot cut it short)."""
    with anyio.CancelScope(shield=True):
        await client.aclose()
