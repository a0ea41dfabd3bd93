"""`rtr_server.fd_limit`: the soft open-file limit goes up to the hard one; a cap that cannot fit
is lowered with one warning line. The last test runs in a real process with lowered limits."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

from rtr_protocol import PduFramer
from rtr_server.fd_limit import plan_fd_limit
from tests.server.helpers import RouterState, base_export, expected_state, write_export
from tests.server.test_cli import RTR_SERVE, connect_with_retry, free_port, reset_until_data

INF = resource.RLIM_INFINITY


def test_the_soft_limit_goes_up_to_the_hard_one_and_the_cap_fits() -> None:
    plan = plan_fd_limit(1024, 1_048_576, 4096, 200)
    assert (plan.soft, plan.max_connections, plan.capped) == (1_048_576, 4096, False)


def test_a_cap_beyond_the_hard_limit_is_lowered_to_what_fits() -> None:
    plan = plan_fd_limit(1024, 2048, 4096, 200)
    assert (plan.soft, plan.max_connections, plan.capped) == (2048, 1848, True)
    assert plan_fd_limit(64, 64, 10, 200).max_connections == 1  # never below one router


def test_unlimited_limits_are_raised_only_as_far_as_needed() -> None:
    assert plan_fd_limit(1024, INF, 4096, 200).soft == 4296
    assert plan_fd_limit(INF, INF, 4096, 200).soft == INF
    assert not plan_fd_limit(INF, INF, 4096, 200).capped
    assert plan_fd_limit(8192, INF, 10, 200).soft == 8192  # never lowered


def test_a_real_process_raises_its_limit_and_logs_the_cap_once() -> None:
    code = textwrap.dedent(
        """
        import logging, resource, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))
        from rtr_server.fd_limit import fit_fd_limit
        plan = fit_fd_limit(4096, 100)
        print("soft", resource.getrlimit(resource.RLIMIT_NOFILE)[0], "cap", plan.max_connections)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out[0] == "open-file limit raised from 256 to 512"
    assert out[1].startswith("--max-connections 4096 cannot be reached: this process may open 512")
    assert "serving at most 412 routers" in out[1]
    assert out[2] == "soft 512 cap 412"
    assert len(out) == 3


def test_rtr_serve_under_a_low_hard_limit_says_so_once_and_serves(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    port = free_port()

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 300))

    proc = subprocess.Popen(
        [
            RTR_SERVE,
            "--source",
            str(path),
            "--listen",
            f"127.0.0.1:{port}",
            "--max-connections",
            "4096",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=limits,  # noqa: PLW1509 - a plain setrlimit, before exec
    )
    try:
        with connect_with_retry(port, proc) as sock:
            sock.settimeout(5.0)
            _, payload = reset_until_data(sock, PduFramer())
            assert RouterState().apply(payload) == expected_state(base_export(), 2)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    text = stderr.decode()
    assert text.count("cannot be reached") == 1, text
    # 300 files, 64 + 1 listener + 2 for the source besides the routers: 233 routers.
    assert (
        "this process may open 300 files and needs 67 besides the routers; serving at most 233"
        in text
    )
