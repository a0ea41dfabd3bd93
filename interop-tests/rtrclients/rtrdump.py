"""rtrdump (stayrtr 0.5.1): one-shot Reset or Serial Query at a chosen RTR version."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rtrclients.vrps import RouterKey, Vrp, router_key, vrp_from_prefix

END_OF_DATA = re.compile(r"End of Data v(\d) \(session: (\d+)\): serial: (\d+)")
KEEP_BYTES = 1 << 20
DATA_PDU = re.compile(
    r"Received: PDU IPv[46] Prefix v\d (\S+)\(->/(\d+)\), origin: AS(\d+), flags: (\d)"
)


@dataclass
class Dump:
    """What one rtrdump run received."""

    asked: int
    version: int | None = None
    session_id: int | None = None
    serial: int | None = None
    vrps: set[Vrp] = field(default_factory=set)
    withdrawn: set[Vrp] = field(default_factory=set)
    router_keys: set[RouterKey] = field(default_factory=set)
    log: str = ""


def dump(
    out_dir: Path,
    host: str,
    port: int,
    version: int,
    *,
    serial: tuple[int, int] | None = None,
    timeout: float = 180.0,
) -> Dump:
    """Run rtrdump once; ``serial`` = (session id, serial) sends a Serial Query instead.

    For a Serial Query the data PDUs are logged (-datapdu) so announcements and withdrawals
    can be told apart; the JSON file mixes them.
    """
    tag = f"v{version}" + (f"-serial{serial[1]}" if serial else "-reset")
    out = out_dir / f"rtrdump-{tag}.json"
    log_path = out_dir / f"rtrdump-{tag}.log"
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    args = ["rtrdump", "-connect", addr, "-rtr.version", str(version), "-file", str(out)]
    args += ["-loglevel", "debug"]
    if serial is not None:
        args += ["-serial", "-session.id", str(serial[0]), "-serial.value", str(serial[1])]
        args += ["-datapdu"]
    out.unlink(missing_ok=True)
    with log_path.open("wb") as log_file:
        done = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    result = Dump(asked=version, log=log_path.read_text(errors="replace"))
    # rtrdump exits 0 even without data (lab G9): only an End of Data proves a complete answer.
    eod = END_OF_DATA.findall(result.log)
    if done.returncode != 0 or not eod:
        raise AssertionError(
            f"rtrdump {tag} failed (exit {done.returncode}):\n{result.log[-3000:]}"
        )
    result.version, result.session_id, result.serial = (int(x) for x in eod[-1])
    doc = json.loads(out.read_text())
    if serial is None:
        result.vrps = {vrp_from_prefix(r["prefix"], r["maxLength"], r["asn"]) for r in doc["roas"]}
    else:
        for prefix, max_length, asn, flags in DATA_PDU.findall(result.log):
            item = vrp_from_prefix(prefix, max_length, asn)
            (result.vrps if flags == "1" else result.withdrawn).add(item)
    result.router_keys = {
        router_key(k["asn"], k["ski"], base64.b64decode(k["pubkey"]))
        for k in doc.get("bgpsec_keys") or []
    }
    if out.stat().st_size > KEEP_BYTES:  # a full-table dump is 40 MB; its log is kept
        out.unlink()
    return result
