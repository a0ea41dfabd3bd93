"""One host-name rule for every upstream URL: HTTP(S) and rtr:// accept and refuse alike."""

from __future__ import annotations

import pytest

from upstream.hostname import is_hostname
from upstream.http_rules import parse_http_url
from upstream.rtr_address import parse_rtr_url

GOOD = [
    "localhost",
    "rpki.example.net",
    "rpki.example.net.",
    "rpki_validator",  # a container service name
    "a" * 63 + ".example",
    "192.0.2.1",
    "xn--bcher-kva.example",
]
#: Internationalised names are checked in their ASCII form (HTTP: by httpx; rtr:// likewise).
IDN = {"bücher.example": "xn--bcher-kva.example"}
BAD = [
    "-rpki.example",
    "rpki-.example",
    "rpki..example",
    "a" * 64 + ".example",
    ("a" * 60 + ".") * 5 + "example",  # over 253 characters
    "rpki*.example",
]


@pytest.mark.parametrize("host", GOOD)
def test_good_host_names_pass_both_url_rules(host: str) -> None:
    assert is_hostname(host)
    assert parse_rtr_url(f"rtr://{host}:323") == (host, 323)
    parse_http_url(f"https://{host}/export.json")


@pytest.mark.parametrize("host", BAD)
def test_bad_host_names_fail_both_url_rules(host: str) -> None:
    assert not is_hostname(host)
    with pytest.raises(ValueError):
        parse_rtr_url(f"rtr://{host}:323")
    with pytest.raises(ValueError):
        parse_http_url(f"https://{host}/export.json")


@pytest.mark.parametrize(("host", "ascii_form"), IDN.items())
def test_internationalised_names_are_checked_in_their_ascii_form(
    host: str, ascii_form: str
) -> None:
    assert parse_rtr_url(f"rtr://{host}") == (ascii_form, 323)
    assert parse_http_url(f"https://{host}/").raw_host.decode() == ascii_form
