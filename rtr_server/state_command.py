"""``rtr-serve state export|import``: a state file as its exchange document, and back (new file).

``export`` reads a state file without changing it -- SQLite through the shared read path (a
read-only connection, also while its owner runs), DuckDB as its owner (so only while no
rtr-serve holds it; nothing is committed) -- and writes the canonical version-2 exchange
document (docs/exchange-format.md) to ``-o OUT`` (written to a temporary file, then renamed)
or standard output. ``import`` reads a document (version 2; version 1 only with
``--version-1``), and commits its state into a NEW state file: one that does not exist or is
empty. The state keeps every time and expiry as written (an import never extends validity);
only its store id becomes the new file's own. Bad arguments, a missing input, an existing
non-empty target or a missing extra exit 2; a state or document that cannot be used
(damaged, invalid, over the limits, held by its owner) exits 1; one line says why.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import anyio

from persistence.errors import MissingExtraError, PersistenceError
from persistence.exchange import ExchangeFormatError, encode
from persistence.exchange_import import decode, import_version_1
from persistence.location import BACKENDS, StateLocation
from persistence.state import PersistedState
from rtr_server.cli_args import OptionParser

__all__ = ["build_state_parser", "main"]

DESCRIPTION = """\
Export a persisted state as its exchange document, or import one into a new state file.

  rtr-serve state export --state FILE [--state-backend sqlite|duckdb] [-o OUT]
  rtr-serve state import DOC --state NEWFILE [--state-backend sqlite|duckdb] [--version-1]

The exchange document is canonical JSON (docs/exchange-format.md): its SHA-256 is the state
digest. export never changes the state file: SQLite is read like a --state-reader does (also
while its owner runs), DuckDB only while no rtr-serve holds it. import writes a NEW state file
(missing or empty); every time and expiry is kept as written, so nothing lives longer than it
would have; the state gets the new file's store id. An rtr-serve started with --state on the
new file recovers what is still valid from it.
"""

EPILOG = """\
exit status:
  0  done
  1  the state file or the document cannot be used (damaged, invalid, over the read limits,
     held by its owner): one line on standard error says why
  2  bad arguments, a missing input, an existing non-empty target, a missing extra
"""


class UsageError(Exception):
    """A wrong argument found after parsing (exit 2)."""


def build_state_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rtr-serve state``."""
    p = OptionParser(
        prog="rtr-serve state",
        allow_abbrev=False,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="{export,import}")
    export = actions.add_parser(
        "export",
        help="write a state file's exchange document",
        description="Write the canonical exchange document of a state file (read-only).",
        allow_abbrev=False,
    )
    export.add_argument("--state", type=Path, required=True, metavar="FILE", help="state file")
    _backend_option(export)
    export.add_argument(
        "-o", "--output", type=Path, metavar="OUT", help="write here (default standard output)"
    )
    imp = actions.add_parser(
        "import",
        help="commit an exchange document into a new state file",
        description="Commit the state of an exchange document into a new (missing or empty) "
        "state file, keeping every time and expiry.",
        allow_abbrev=False,
    )
    imp.add_argument("document", type=Path, metavar="DOC", help="the exchange document")
    imp.add_argument(
        "--state", type=Path, required=True, metavar="NEWFILE", help="the new state file"
    )
    _backend_option(imp)
    imp.add_argument(
        "--version-1",
        action="store_true",
        help="DOC is a version-1 document (no ASPA address families, hexadecimal mapped IPv6): "
        "its ASPAs cover both families",
    )
    for sub in (export, imp):
        sub.error = p.error  # type: ignore[method-assign] # one line, exit 2
    return p


def _backend_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-backend",
        choices=BACKENDS,
        default="sqlite",
        help="the state file's backend (default sqlite)",
    )


def main(argv: Sequence[str]) -> int:
    """``rtr-serve state ...``; the exit status."""
    parser = build_state_parser()
    args = parser.parse_args(list(argv))
    location = StateLocation(args.state_backend, args.state)
    try:
        if args.action == "export":
            anyio.run(_export, _existing(location), args.output)
        else:
            anyio.run(_import, location, _read_document(location, args.document, args.version_1))
    except (UsageError, MissingExtraError) as exc:
        sys.stderr.write(f"rtr-serve state {args.action}: error: {exc}\n")
        return 2
    except (PersistenceError, ExchangeFormatError, OSError) as exc:
        sys.stderr.write(f"rtr-serve state {args.action}: {_describe(exc)}\n")
        return 1
    return 0


def _describe(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


async def _export(location: StateLocation, output: Path | None) -> None:
    """Read the state of ``location`` (read-only) and write its exchange document."""
    backend = location.make_backend(read_only=location.backend == "sqlite")
    try:
        await backend.open()
        read = await backend.read_state()
        limits = backend.limits
    finally:
        await backend.close()
    if read is None:
        raise PersistenceError(f"{location}: holds no committed state yet")
    _, state = read
    size = _write(encode(state, limits=limits), output)
    sys.stderr.write(
        f"exported state {state.state_id} of {location} ({len(state.sources)} sources, "
        f"{state.vrp_count()} VRPs) as {size} octets to {output or 'standard output'}\n"
    )


def _write(chunks: Iterable[bytes], output: Path | None) -> int:
    """Write the chunks to ``output`` (a temporary file renamed at the end) or stdout."""
    size = 0
    if output is None:
        stream = sys.stdout.buffer
        for chunk in chunks:
            stream.write(chunk)
            size += len(chunk)
        stream.flush()
        return size
    temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("wb") as file:
            for chunk in chunks:
                file.write(chunk)
                size += len(chunk)
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(output)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return size


def _existing(location: StateLocation) -> StateLocation:
    """``location``, whose file must exist (an export never creates one)."""
    if not location.path.is_file():
        raise UsageError(f"{location.path}: no such state file")
    return location


def _read_document(location: StateLocation, document: Path, version_1: bool) -> PersistedState:
    """The state of ``document``, once the target is known to be new."""
    if not document.is_file():
        raise UsageError(f"{document}: no such document")
    path = location.path
    if path.exists() and (not path.is_file() or path.stat().st_size > 0):
        raise UsageError(f"{path} exists and is not empty: import only into a new state file")
    data = document.read_bytes()
    return import_version_1(data) if version_1 else decode(data)


async def _import(location: StateLocation, state: PersistedState) -> None:
    """Commit ``state`` into the new state file of ``location``."""
    backend = location.make_backend()
    try:
        await backend.open()
        store_id = backend.store_id
        assert store_id is not None
        receipt = await backend.commit(_rehome(state, store_id), None)
    finally:
        await backend.close()
    sys.stderr.write(
        f"imported state {receipt.snapshot_id} ({len(state.sources)} sources, "
        f"{state.vrp_count()} VRPs) into {location}\n"
    )


def _rehome(state: PersistedState, store_id: str) -> PersistedState:
    """``state`` in the new store: its store id, nothing else changed."""
    return replace(state, store_id=store_id)
