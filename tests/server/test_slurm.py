"""SLURM end to end: a changed SLURM file shows up in the next serial's delta as a router sees
it over TCP (Serial Query), an invalid change keeps the serial and logs why, and bad SLURM files
at start are configuration errors (exit 2, one line)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import anyio
import pytest

from rtr_protocol import AspaPdu, Ipv4Prefix
from rtr_server.config_file import ConfigError, parse_config
from tests.server.helpers import (
    RouterState,
    app_config,
    base_export,
    expected_state,
    port_of,
    running_app,
    wait_until,
    write_export,
)
from tests.server.rtr_client import PayloadPdu, Response, RtrClient
from tests.server.test_cli import run_cli
from tests.slurm_docs import slurm_json

#: Filters one VRP of `base_export`, asserts a new VRP and an ASPA of a new customer.
CHANGE = slurm_json(
    prefixFilters=[{"prefix": "192.0.2.0/24", "asn": 64497, "comment": "leak"}],
    prefixAssertions=[{"prefix": "198.51.100.0/24", "asn": 64511}],
    aspaAssertions=[{"customerAsn": 64540, "providerAsns": [64541, 64542]}],
)
INVALID = slurm_json(
    prefixAssertions=[{"prefix": "198.51.100.0/24", "asn": 1, "maxPrefixLength": 23}]
)
FILTERED = (4, 0xC0000200, 24, 24, 64497)  # 192.0.2.0/24-24 AS64497
ASSERTED = (4, 0xC6336400, 24, 24, 64511)  # 198.51.100.0/24-24 AS64511


@pytest.mark.anyio
@pytest.mark.parametrize("version", [0, 1, 2])
async def test_slurm_changes_in_the_next_serial(
    tmp_path: Path, export_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    caplog.set_level(logging.INFO)
    local = tmp_path / "local.json"
    write_export(local, slurm_json())
    config = dataclasses.replace(app_config(export_path), slurm=(str(local),))
    async with (
        running_app(config) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        full = await client.reset(version)
        old = RouterState().apply(full.payload)
        assert old == expected_state(base_export(), version)
        assert FILTERED in old.prefixes
        session, old_serial = full.cache_response.session_id, full.end_of_data.serial

        write_export(local, CHANGE)
        await wait_until(
            lambda: app.state is not None and app.state.serial.value != old_serial,
            what="the serial after the SLURM change",
        )
        assert app.state is not None
        new_serial = app.state.serial.value
        delta = await client.serial(version, session, old_serial)
        assert isinstance(delta, Response), delta
        assert delta.end_of_data.serial == new_serial == (old_serial + 1) % 2**32

        expected = expected_state(base_export(), version)
        expected.prefixes.discard(FILTERED)
        expected.prefixes.add(ASSERTED)
        wire: list[PayloadPdu] = [
            Ipv4Prefix(version, True, 24, 24, 0xC6336400, 64511),
            Ipv4Prefix(version, False, 24, 24, 0xC0000200, 64497),
        ]
        if version == 2:
            expected.aspas[64540] = (64541, 64542)
            wire.append(AspaPdu(version, True, 64540, (64541, 64542)))
        assert delta.payload == wire  # exactly the net change, in §11.2 order
        current = old.copy().apply(delta.payload)
        assert current == expected

        # An invalid change: logged with the file, member path and reason; the serial stays.
        caplog.clear()
        write_export(local, INVALID)
        upstream_client = app.client
        assert upstream_client is not None
        await wait_until(lambda: upstream_client.slurm.error is not None, what="the rejection")
        await anyio.sleep(0.3)  # several polls of the export and the SLURM file
        assert app.state.serial.value == new_serial
        rejected = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        reason = (
            f"{local}: locallyAddedAssertions.prefixAssertions[0].maxPrefixLength: 23 is outside "
            "24..32"
        )
        assert rejected == [f"SLURM: rejected: {reason}; the previous SLURM policy stays in force"]
        unchanged = await client.serial(version, session, new_serial)
        assert isinstance(unchanged, Response), unchanged
        assert unchanged.payload == []
        assert unchanged.end_of_data.serial == new_serial

        # Removing the policy brings the original table back in one more serial.
        write_export(local, slurm_json())
        await wait_until(
            lambda: app.state is not None and app.state.serial.value != new_serial,
            what="the serial after the SLURM file was emptied",
        )
        back = await client.serial(version, session, new_serial)
        assert isinstance(back, Response), back
        assert current.copy().apply(back.payload) == expected_state(base_export(), version)


# ---------------------------------------------------------------- start-up and configuration


def test_invalid_slurm_at_start_exits_2(export_path: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    result = run_cli(
        "--source", str(export_path), "--listen", "127.0.0.1:0", "--slurm", str(missing)
    )
    assert result.returncode == 2, result
    assert result.stderr == (
        f"rtr-serve: error: --slurm: {missing}: cannot read: No such file or directory\n"
    )
    bad = tmp_path / "bad.json"
    bad.write_text(INVALID)
    result = run_cli("--source", str(export_path), "--listen", "127.0.0.1:0", "--slurm", str(bad))
    assert result.returncode == 2, result
    assert result.stderr == (
        f"rtr-serve: error: --slurm: {bad}: locallyAddedAssertions.prefixAssertions[0]."
        "maxPrefixLength: 23 is outside 24..32\n"
    )


def test_overlapping_slurm_files_at_start_exit_2(export_path: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(slurm_json(prefixFilters=[{"prefix": "10.0.0.0/8"}]))
    b.write_text(slurm_json(prefixFilters=[{"prefix": "10.1.0.0/16", "asn": 1}]))
    result = run_cli("--source", str(export_path), "--slurm", str(a), "--slurm", str(b))
    assert result.returncode == 2, result
    assert len(result.stderr.splitlines()) == 1
    assert "SLURM files overlap (RFC 8416 §4.2)" in result.stderr


def test_config_file_slurm_key(tmp_path: Path) -> None:
    local = tmp_path / "local.json"
    local.write_text(CHANGE)
    conf = tmp_path / "rtr.toml"
    conf.write_text(f'[server]\nslurm = ["{local}"]\n[[sources]]\nurl = "x.json"\n')
    assert parse_config(conf.read_text()).server["slurm"] == [str(local)]
    done = run_cli("check-config", str(conf))
    assert done.returncode == 0, done.stderr
    assert f"  slurm {local}: prefixFilters=1, prefixAssertions=1, aspaAssertions=1\n" in (
        done.stdout
    )
    local.write_text(INVALID)
    done = run_cli("check-config", str(conf))
    assert done.returncode == 2
    assert done.stderr == (
        f"rtr-serve: {conf}: server.slurm: {local}: locallyAddedAssertions.prefixAssertions[0]."
        "maxPrefixLength: 23 is outside 24..32\n"
    )
    with pytest.raises(ConfigError, match=r"server\.slurm: must be a list of SLURM file paths"):
        parse_config("[server]\nslurm = [1]")
    with pytest.raises(ConfigError, match=r"server\.slurm: must be list"):
        parse_config("[server]\nslurm = 'a.json'")
