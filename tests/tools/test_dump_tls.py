"""``rtr-serve dump rtrs://``: rtr-serve's TLS listener, with and without a router certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtr_server.server import RtrServer
from tests.server.helpers import app_config, base_export, running_app, write_export
from tests.server.tls_helpers import LabCerts, make_certs, tls_listen
from tests.tools.helpers import rtr_serve

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> LabCerts:
    return make_certs(tmp_path_factory.mktemp("tls"))


def tls_port(server: RtrServer) -> int:
    (port,) = [port for spec, _, port in server.bound if spec.tls]
    return port


async def test_dump_over_tls_verifies_the_cache(tmp_path: Path, certs: LabCerts) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    config = app_config(path, listen=(tls_listen(),), tls=certs.server_files(client_ca=False))
    async with running_app(config) as app:
        assert app.state is not None
        url = f"rtrs://127.0.0.1:{tls_port(app.server)}"
        ran = await rtr_serve("dump", url, "--ca-file", str(certs.ca))
        assert ran.returncode == 0, ran.stderr
        doc = json.loads(ran.stdout)
        assert doc["metadata"]["cache"] == url
        assert doc["metadata"]["serial"] == app.state.serial.value
        assert len(doc["roas"]) == app.state.snapshot.vrp_count
        # Without the lab CA the certificate cannot be verified: one line, exit 1.
        ran = await rtr_serve("dump", url)
        assert ran.returncode == 1
        assert "CERTIFICATE_VERIFY_FAILED" in ran.stderr
        assert ran.stderr.count("\n") == 1


async def test_dump_presents_a_router_certificate(tmp_path: Path, certs: LabCerts) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    config = app_config(path, listen=(tls_listen(),), tls=certs.server_files())
    async with running_app(config) as app:
        port = tls_port(app.server)
        cert, key = certs.router("127.0.0.1")
        ran = await rtr_serve(
            "dump", f"rtr://127.0.0.1:{port}", "--tls", "--ca-file", str(certs.ca),
            "--cert", str(cert), "--key", str(key), "--format", "csv",
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.startswith("action,kind,asn,prefix")
        ran = await rtr_serve("dump", f"rtr://127.0.0.1:{port}", "--cert", str(cert))
        assert ran.returncode == 2
        assert "--cert and --key" in ran.stderr
