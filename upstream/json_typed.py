"""The typed first read of an export: its ``roas`` as small structs, every other section raw.

msgspec decodes the bytes in one pass straight into `Roa` structs (no dict per entry, no str
copy of the text) when every ``roas`` entry has a string ``prefix``, integer ``asn`` and
``expires`` and, if present, an integer ``maxLength``. The other sections the parser knows come
back as raw JSON, and a document of any other shape (or not JSON at all) gives None:
`upstream.json_format` then reads it the general way, which names what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

__all__ = [
    "PIECE_DECODER",
    "PIECE_ERRORS",
    "UNSET",
    "Roa",
    "TypedExport",
    "decode_frame",
    "decode_typed",
]

#: A ``maxLength`` that was not written (the prefix length applies).
UNSET = msgspec.UNSET


class Roa(msgspec.Struct, gc=False):
    """One ``roas`` entry of the common shape (unknown keys are skipped by the decoder)."""

    prefix: str
    asn: int
    expires: int
    maxLength: int | msgspec.UnsetType = msgspec.UNSET  # noqa: N815 (the export's key)


_Raw = msgspec.Raw | msgspec.UnsetType


class _Sections(msgspec.Struct):
    """The sections besides ``roas`` that the parser knows, raw."""

    metadata: _Raw = msgspec.UNSET
    bgpsec_keys: _Raw = msgspec.UNSET
    routerKeys: _Raw = msgspec.UNSET  # noqa: N815
    router_keys: _Raw = msgspec.field(default=msgspec.UNSET, name="router-keys")
    aspas: _Raw = msgspec.UNSET
    provider_authorizations: _Raw = msgspec.UNSET
    aspa: _Raw = msgspec.UNSET


class _Document(_Sections, kw_only=True):
    roas: list[Roa]


class _Frame(_Sections, kw_only=True):
    roas: list[msgspec.Raw]


#: The document's keys, as written, of the raw sections.
_RAW_KEYS = (
    ("metadata", "metadata"),
    ("bgpsec_keys", "bgpsec_keys"),
    ("routerKeys", "routerKeys"),
    ("router_keys", "router-keys"),
    ("aspas", "aspas"),
    ("provider_authorizations", "provider_authorizations"),
    ("aspa", "aspa"),
)

_DECODER = msgspec.json.Decoder(_Document)
_FRAME_DECODER = msgspec.json.Decoder(_Frame)
#: Decodes one piece of a ``roas`` array (`upstream.piece_reader`), brackets added.
PIECE_DECODER = msgspec.json.Decoder(list[Roa])
#: What the piece decoder raises on bytes that are not such entries.
PIECE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


@dataclass(frozen=True, slots=True)
class TypedExport:
    """The ``roas`` entries, and the other known sections as one small JSON document."""

    roas: list[Roa]
    #: ``{"roas": [], ...}`` with every other known section present in the export, raw.
    rest: bytes


def decode_typed(data: bytes | str) -> TypedExport | None:
    """The export's typed ``roas`` and raw rest; None when it is not of the common shape."""
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return TypedExport(doc.roas, _rest(doc))


def decode_frame(frame: bytes, mark: bytes) -> tuple[bytes, bytes] | None:
    """The raw payload sections and metadata of an export whose ``roas`` became ``[mark]``.

    The sections are ``{"roas": [], ...}`` with the other known payload sections, raw; the
    metadata is ``{"roas": [], "metadata": ...}`` (without the key when the export has none).
    None unless ``frame`` is a JSON document of the common shape whose (last) top-level ``roas``
    is exactly that array: then the array that was cut out is the export's ``roas``, at the top
    level and not overridden by a later ``roas`` key.
    """
    try:
        doc = _FRAME_DECODER.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if len(doc.roas) != 1 or bytes(doc.roas[0]) != mark:
        return None
    return _rest(doc, _RAW_KEYS[1:]), _rest(doc, _RAW_KEYS[:1])


def _rest(doc: _Sections, keys: tuple[tuple[str, str], ...] = _RAW_KEYS) -> bytes:
    """``{"roas": [], ...}`` with the document's known sections ``keys``, raw."""
    parts = [b'"roas":[]']
    for attr, key in keys:
        raw = getattr(doc, attr)
        if raw is not msgspec.UNSET:
            parts.append(b'"' + key.encode() + b'":' + bytes(raw))
    return b"{" + b",".join(parts) + b"}"
