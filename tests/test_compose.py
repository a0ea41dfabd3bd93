"""docker-compose.yml (Docker does not run here): services, builds, ports, router configs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"
ROUTERS = {"bird": "bird2", "frr": "frr-rpki-rtrlib"}  # service -> Debian package it installs
#: How each router config names its RTR cache: (host, port).
CACHE_LINE = {
    "bird": re.compile(r'^\s*remote\s+"?([\w.:-]+)"?\s+port\s+(\d+)\s*;', re.MULTILINE),
    "frr": re.compile(r"^\s*rpki cache\s+(\S+)\s+(\d+)\s+preference\s+\d+", re.MULTILINE),
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def option(command: list[str], name: str) -> str:
    """The value after ``name`` in an argument list."""
    assert name in command, f"{name} missing from {command}"
    return command[command.index(name) + 1]


def rtr_port(services: dict[str, dict[str, Any]]) -> int:
    """The port rtr-serve listens on inside its container (from --listen HOST:PORT)."""
    listen = option(services["rtr-serve"]["command"], "--listen")
    return int(listen.rsplit(":", 1)[1])


def volumes(service: dict[str, Any]) -> list[tuple[Path, str, str]]:
    """(host path, container path, mode) of each bind mount in short syntax."""
    found = []
    for entry in service.get("volumes", []):
        host, container, *mode = str(entry).split(":")
        assert host.startswith("./"), f"bind mounts are relative to the repo: {entry}"
        found.append((REPO / host, container, mode[0] if mode else "rw"))
    return found


def test_service_names(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"rtr-serve", *ROUTERS}


def test_rtr_serve_is_built_from_the_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    build = services["rtr-serve"]["build"]
    assert build["context"] == "."
    dockerfile = REPO / build.get("dockerfile", "Dockerfile")
    assert dockerfile == REPO / "Dockerfile"
    text = dockerfile.read_text()
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.MULTILINE)
    assert re.search(r"^RUN pip install \.", text, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["rtr-serve"\]', text, re.MULTILINE)
    # What the Dockerfile copies exists (it is the package list of pyproject.toml).
    for src in re.findall(r"^COPY (\S+) \./", text, re.MULTILINE):
        assert (REPO / src).exists(), src


def test_rtr_serve_port_and_export(services: dict[str, dict[str, Any]]) -> None:
    service = services["rtr-serve"]
    command = service["command"]
    port = rtr_port(services)
    assert option(command, "--listen") == f"0.0.0.0:{port}"  # inside its container
    # Published to the host on loopback only.
    assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
    mounts = volumes(service)
    assert mounts == [(REPO / "examples", "/data", "ro")]
    source = option(command, "--source")
    assert source.startswith("/data/")
    assert (REPO / "examples" / source.removeprefix("/data/")).is_file()


def test_rtr_serve_timers_are_valid(services: dict[str, dict[str, Any]]) -> None:
    command = services["rtr-serve"]["command"]
    refresh, retry, expire = (
        int(option(command, f"--{n}")) for n in ("refresh", "retry", "expire")
    )
    # RFC 8210 section 6 ranges; OpenBGPD and RTRlib refuse values outside them.
    assert 1 <= refresh <= 86_400
    assert 1 <= retry <= 7_200
    assert 600 <= expire <= 172_800
    assert expire > refresh
    assert expire > retry


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router_image_installs_its_package(services: dict[str, dict[str, Any]], name: str) -> None:
    build = services[name]["build"]
    dockerfile = REPO / build["context"] / build["dockerfile"]
    text = dockerfile.read_text()
    assert re.search(r"^FROM debian:bookworm(-slim)?\s*$", text, re.MULTILINE)
    assert ROUTERS[name] in text


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router_config_points_at_rtr_serve(services: dict[str, dict[str, Any]], name: str) -> None:
    service = services[name]
    mounts = volumes(service)
    assert mounts, f"{name} mounts no config"
    for host, container, mode in mounts:
        assert host.is_file(), f"{name}: mounted config {host} does not exist"
        assert host.is_relative_to(REPO / "interop-tests" / "compose")
        assert mode == "ro"
        assert container in " ".join(service["command"]), f"{container} is not used by {name}"
        caches = CACHE_LINE[name].findall(host.read_text())
        assert caches == [("rtr-serve", str(rtr_port(services)))], caches


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router_starts_after_rtr_serve(services: dict[str, dict[str, Any]], name: str) -> None:
    # RTR clients fall back to a 600 s retry when the cache is not up yet (interop lab G1).
    assert services[name]["depends_on"]["rtr-serve"]["condition"] == "service_healthy"
    assert "healthcheck" in services["rtr-serve"]
    assert "ports" not in services[name]  # routers publish nothing on the host
