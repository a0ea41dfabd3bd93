"""TCP-MD5 and TCP-AO on a real ``rtr-serve``: a router signing with the configured key gets the
table, an unsigned or wrongly signed one is refused by the kernel while an unkeyed listener of
the same process serves it; SIGHUP adds and removes keys on the live listener (rollover); bad
key tables exit 2 without the key in the message; TCP-AO gives a clear start-up error where the
kernel lacks it (and is tested end to end where it has it).

The clients set their keys with their own packing of the kernel structures (``TCP_MD5SIG``
without the prefix flag, ``TCP_AO_ADD_KEY``), independent of `rtr_server.tcp_auth`.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from rtr_protocol import PduFramer
from rtr_server.tcp_auth import ao_supported, apply_keys, parse_md5_keys
from tests.server.helpers import base_export, write_export
from tests.server.test_cli import RTR_SERVE, free_port, reset_until_data
from tests.server.test_sighup import rtr_serve

TCP_MD5SIG = 14
TCP_AO_ADD_KEY = 38
LOOPBACK = socket.inet_aton("127.0.0.1")


def _sockaddr_in(address: bytes = LOOPBACK) -> bytes:
    return (struct.pack("=H", socket.AF_INET) + b"\0\0" + address).ljust(128, b"\0")


def md5_socket(key: bytes | None) -> socket.socket:
    """A client socket that signs what it sends to 127.0.0.1 with ``key`` (None: unsigned)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if key is not None:
        value = _sockaddr_in() + struct.pack("=BBHi80s", 0, 0, len(key), 0, key)
        sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, value)
    return sock


def ao_socket(key: bytes, send_id: int, recv_id: int) -> socket.socket:
    """A client socket with one TCP-AO master key (hmac(sha256)) for 127.0.0.1."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    value = _sockaddr_in() + struct.pack(
        "=64siIHBBBBBB80s", b"hmac(sha256)", 0, 0, 0, 32, send_id, recv_id, 12, 0, len(key), key
    )
    sock.setsockopt(socket.IPPROTO_TCP, TCP_AO_ADD_KEY, value.ljust(288, b"\0"))
    return sock


def table_over(sock: socket.socket, port: int) -> int:
    """Connect, Reset Query until data; the number of payload PDUs received."""
    with sock:
        sock.settimeout(5.0)
        sock.connect(("127.0.0.1", port))
        _, payload = reset_until_data(sock, PduFramer())
        return len(payload)


def refused(sock: socket.socket, port: int) -> bool:
    """True when the connection does not come up within 1.5 s (the kernel drops the SYNs)."""
    with sock:
        sock.settimeout(1.5)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            return True
        return False


def config(export: Path, keyed: int, open_port: int, keys: str) -> str:
    return (
        '[server]\nnotify_interval = 0\nlog_format = "json"\n'
        f'[[sources]]\nurl = "{export}"\n'
        f'[[listeners]]\naddress = "127.0.0.1:{keyed}"\n{keys}\n'
        f'[[listeners]]\naddress = "127.0.0.1:{open_port}"\n'
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_md5_signed_router_served_unsigned_refused_and_sighup_rollover(
    tmp_path: Path, backend: str
) -> None:
    export, cfg = tmp_path / "export.json", tmp_path / "rtr-serve.toml"
    write_export(export, base_export())
    keyed, open_port = free_port(), free_port()
    old = 'tcp_md5 = [{ peer = "127.0.0.0/8", key = "old-secret" }]'
    cfg.write_text(config(export, keyed, open_port, old))
    with rtr_serve("--config", str(cfg), "--async-backend", backend) as (proc, log):
        log.wait_for(lambda line: "listening for routers" in line.get("msg", ""))
        expected = table_over(md5_socket(None), open_port)  # the unkeyed listener
        assert expected > 0
        assert table_over(md5_socket(b"old-secret"), keyed) == expected
        assert refused(md5_socket(None), keyed)
        assert refused(md5_socket(b"wrong"), keyed)
        # Rollover: the router at 127.0.0.1 moves to a new key, the rest of /8 keeps the old.
        new = (
            'tcp_md5 = [{ peer = "127.0.0.0/8", key = "old-secret" }, '
            '{ peer = "127.0.0.1/32", key = "new-secret" }]'
        )
        cfg.write_text(config(export, keyed, open_port, new))
        proc.send_signal(signal.SIGHUP)
        line = log.wait_for(lambda line: line.get("event") == "config_reload")
        assert line["outcome"] == "applied", line
        assert "TCP-MD5/AO keys" in line["changed"]
        assert line["restart_required"] == []
        assert table_over(md5_socket(b"new-secret"), keyed) == expected
        assert refused(md5_socket(b"old-secret"), keyed)
        # Removing the /32 key: 127.0.0.1 is under the /8 key again.
        cfg.write_text(config(export, keyed, open_port, old))
        proc.send_signal(signal.SIGHUP)
        log.wait_for(lambda _: len(log.events("config_reload")) >= 2)
        assert log.events("config_reload")[1]["outcome"] == "applied"
        assert table_over(md5_socket(b"old-secret"), keyed) == expected
        assert refused(md5_socket(b"new-secret"), keyed)
    text = "".join(log.raw)
    assert "old-secret" not in text
    assert "new-secret" not in text
    assert "TCP-MD5 for 127.0.0.0/8" in text


AO_ENTRY = (
    'tcp_ao = [{ peer = "127.0.0.1", key_id = 1, rnext_id = 1, algorithm = "hmac(sha256)", '
    'key = "s3cret" }]'
)


def test_ipv4_keys_on_a_dual_stack_socket_are_taken_by_the_kernel() -> None:
    """An IPv4 prefix on an AF_INET6 socket goes in v4-mapped (not bound: no address used)."""
    md5 = parse_md5_keys([{"peer": "127.0.0.0/8", "key": "k"}, {"peer": "::1", "key": "k"}], "t")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        apply_keys(sock, md5, ())
        apply_keys(sock, md5, (), remove=True)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        apply_keys(sock, md5, ())  # the IPv6 key is left out on an IPv4 socket


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ('tcp_md5 = [{ peer = "127.0.0.1/8", key = "s3cret" }]', "tcp_md5[0].peer"),
        ('tcp_md5 = [{ peer = "127.0.0.1", key = "' + "x" * 81 + '" }]', "longer than 80"),
        ('tcp_md5 = [{ peer = "127.0.0.1", secret = "s3cret" }]', "tcp_md5[0].secret"),
        (
            'tcp_md5 = [{ peer = "127.0.0.1", key = "s3cret" }, { peer = "127.0.0.1", key = "b" }]',
            "tcp_md5[1].peer",
        ),
        (
            AO_ENTRY.replace("key_id = 1", "key_id = 300"),
            "tcp_ao[0].key_id",
        ),
        (
            AO_ENTRY.replace('"hmac(sha256)"', '"md5"'),
            "tcp_ao[0].algorithm",
        ),
        (
            'tcp_md5 = [{ peer = "127.0.0.1", key = "s3cret" }]\n' + AO_ENTRY,
            "127.0.0.1/32 also has a tcp_md5 key",
        ),
    ],
)
def test_bad_key_tables_exit_2_without_the_key(tmp_path: Path, keys: str, message: str) -> None:
    export, cfg = tmp_path / "export.json", tmp_path / "rtr-serve.toml"
    write_export(export, base_export())
    cfg.write_text(config(export, free_port(), free_port(), keys))
    done = subprocess.run(
        [RTR_SERVE, "--config", str(cfg)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "s3cret" not in done.stderr


AO_KEYS = (
    'tcp_ao = [{ peer = "127.0.0.1", key_id = 7, rnext_id = 9, algorithm = "hmac(sha256)",'
    ' key = "ao-secret" }]'
)


def test_tcp_ao_where_the_kernel_lacks_it_is_a_start_up_error(tmp_path: Path) -> None:
    reason = ao_supported()
    if reason is None:
        pytest.skip("this kernel supports TCP-AO (see the end-to-end test)")
    export, cfg = tmp_path / "export.json", tmp_path / "rtr-serve.toml"
    write_export(export, base_export())
    cfg.write_text(config(export, free_port(), free_port(), AO_KEYS))
    done = subprocess.run(
        [RTR_SERVE, "--config", str(cfg)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "listeners[0].tcp_ao" in done.stderr
    assert "does not support TCP-AO" in done.stderr
    assert "ao-secret" not in done.stderr


def test_tcp_ao_signed_router_served_unsigned_refused(tmp_path: Path) -> None:
    reason = ao_supported()
    if reason is not None:
        pytest.skip(f"TCP-AO end to end needs kernel support: {reason}")
    export, cfg = tmp_path / "export.json", tmp_path / "rtr-serve.toml"
    write_export(export, base_export())
    keyed, open_port = free_port(), free_port()
    cfg.write_text(config(export, keyed, open_port, AO_KEYS))
    with rtr_serve("--config", str(cfg)) as (_, log):
        log.wait_for(lambda line: "listening for routers" in line.get("msg", ""))
        expected = table_over(md5_socket(None), open_port)
        # The router sends with our RecvID (9) and expects our SendID (7).
        assert table_over(ao_socket(b"ao-secret", 9, 7), keyed) == expected
        assert refused(md5_socket(None), keyed)
        assert refused(ao_socket(b"wrong", 9, 7), keyed)
    assert "ao-secret" not in "".join(log.raw)
