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

__all__ = ["UNSET", "Roa", "TypedExport", "decode_typed"]

#: A ``maxLength`` that was not written (the prefix length applies).
UNSET = msgspec.UNSET


class Roa(msgspec.Struct, gc=False):
    """One ``roas`` entry of the common shape (unknown keys are skipped by the decoder)."""

    prefix: str
    asn: int
    expires: int
    maxLength: int | msgspec.UnsetType = msgspec.UNSET  # noqa: N815 (the export's key)


_Raw = msgspec.Raw | msgspec.UnsetType


class _Document(msgspec.Struct):
    roas: list[Roa]
    metadata: _Raw = msgspec.UNSET
    bgpsec_keys: _Raw = msgspec.UNSET
    routerKeys: _Raw = msgspec.UNSET  # noqa: N815
    router_keys: _Raw = msgspec.field(default=msgspec.UNSET, name="router-keys")
    aspas: _Raw = msgspec.UNSET
    provider_authorizations: _Raw = msgspec.UNSET
    aspa: _Raw = msgspec.UNSET


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
    parts = [b'"roas":[]']
    for attr, key in _RAW_KEYS:
        raw = getattr(doc, attr)
        if raw is not msgspec.UNSET:
            parts.append(b'"' + key.encode() + b'":' + bytes(raw))
    return TypedExport(doc.roas, b"{" + b",".join(parts) + b"}")
