"""`packed_key`: a VRP of the common export shape straight to its packed key, or None.

No ``ipaddress`` object and no exception on the way: a prefix string, an integer ASN and an
integer (or absent) max length become the key of `snapshot.packed` when they are valid; anything
else gives None, and the caller reads the entry the general way (`upstream.json_fields`), which
names what is wrong.
"""

from __future__ import annotations

import socket
from typing import Final

__all__ = ["ABSENT", "packed_key"]

_INET_PTON = socket.inet_pton
_AF_INET = socket.AF_INET
_AF_INET6 = socket.AF_INET6
_LENGTHS: Final = {str(n): n for n in range(129)}
_LENGTH_PAIRS: Final = [[bytes((m, p)) for p in range(129)] for m in range(129)]

#: A ``maxLength`` that was not given (the prefix length applies).
ABSENT: Final = object()


def packed_key(prefix: str, asn: int, max_length: object, absent: object = ABSENT) -> bytes | None:
    """The packed key of a VRP of the common shape (``max_length`` an int or ``absent``).

    None when it is not valid that way.
    """
    address, _, length_text = prefix.partition("/")
    length = _LENGTHS.get(length_text)
    if length is None:
        return None
    if max_length is absent:
        max_length = length
    if type(max_length) is not int or not 0 <= length <= max_length or asn >> 32 or asn < 0:
        return None
    try:
        raw = _INET_PTON(_AF_INET6 if ":" in address else _AF_INET, address)
    except (OSError, ValueError):  # ValueError: an embedded NUL
        return None
    bits = len(raw) * 8
    if max_length > bits or int.from_bytes(raw) & ((1 << (bits - length)) - 1):
        return None
    return raw + _LENGTH_PAIRS[max_length][length] + asn.to_bytes(4)
