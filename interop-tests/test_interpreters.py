"""P-38: state files committed and read across real CPython 3.11, 3.12, 3.13 and 3.14 agree.

The host's interpreter (the project's venv, 3.11) and the chroots built by
``.ci/interpreters-setup.sh`` (Ubuntu noble: 3.12; Debian forky: 3.13, 3.14) each run
``interpreters/check_state.py`` with only the standard library, the checkout (bind-mounted
read-only) and copies of its pure-Python dependencies on ``PYTHONPATH``. The SQLite files go to
one shared folder (bind-mounted read-write), so every interpreter reads every other's file.
Every bind mount lives in a private mount namespace (``unshare --mount``) and ends with the
process. Skipped only when the setup script was not run.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rtrclients import summary

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
SCRIPT = Path("interop-tests/interpreters/check_state.py")
BASE = Path(os.environ.get("INTERPRETERS_ROOT", HERE / ".cache" / "interpreters")).resolve()
SETUP_HINT = "run `bash .ci/interpreters-setup.sh` (as root) first"
#: The pure-Python distributions the persistence path imports (module names).
PURE_DEPENDENCIES = ("anyio", "sniffio", "idna", "typing_extensions")
#: Where the chroots see the checkout, the dependencies and the shared folder of state files.
INNER = Path("/p38")
#: The first IPv4-mapped prefix of the fixed state, as the contract spells it.
MAPPED_TEXT = "::ffff:192.0.2.0/120"
#: Every IPv4-mapped prefix of the fixed state, as its exchange document must spell them.
MAPPED_IN_DOCUMENT = [
    "::ffff:0.0.0.0/96",
    "::ffff:10.0.0.0/104",
    "::ffff:192.0.2.0/120",
    "::ffff:198.51.100.7/128",
]
RUN_TIMEOUT = 120.0


@dataclass(frozen=True)
class Interpreter:
    """One CPython: the host's (``root`` None) or one in a chroot."""

    version: str
    root: Path | None

    @property
    def name(self) -> str:
        """``3.11 (host)`` or ``3.13 (forky)``."""
        where = "host" if self.root is None else self.root.name.removesuffix("-root")
        return f"{self.version} ({where})"


INTERPRETERS = (
    Interpreter("3.11", None),
    Interpreter("3.12", BASE / "noble-root"),
    Interpreter("3.13", BASE / "forky-root"),
    Interpreter("3.14", BASE / "forky-root"),
)


@dataclass
class Lab:
    """The shared folder of state files and the dependency copies."""

    files: Path
    deps: Path
    seconds: dict[str, float]

    def path(self, interp: Interpreter, name: str) -> str:
        """Where ``interp`` sees the state file ``name``."""
        return str((INNER / "run" if interp.root is not None else self.files) / name)

    def run(self, interp: Interpreter, *args: str) -> Any:
        """``check_state.py ARGS`` under ``interp``; its JSON document."""
        env = ["LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"]
        if interp.root is None:
            python = os.path.realpath(sys.executable)
            argv = [
                "env",
                "-i",
                *env,
                f"PYTHONPATH={CHECKOUT}:{self.deps}",
                python,
                "-S",
                "-B",
                str(CHECKOUT / SCRIPT),
                *args,
            ]
        else:
            inner = f"PYTHONPATH={INNER / 'src'}:{INNER / 'deps'}"
            python = f"/usr/bin/python{interp.version}"
            mounts = (
                'set -e; r="$1"; shift; '
                'mount --bind -o ro "$SRC" "$r/p38/src"; '
                'mount --bind -o ro "$DEPS" "$r/p38/deps"; '
                'mount --bind "$FILES" "$r/p38/run"; '
                'exec chroot "$r" "$@"'
            )
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                mounts,
                "sh",
                str(interp.root),
                "/usr/bin/env",
                "-i",
                *env,
                inner,
                python,
                "-S",
                "-B",
                str(INNER / "src" / SCRIPT),
                *args,
            ]
        started = time.monotonic()
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
            env={
                "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                "SRC": str(CHECKOUT),
                "DEPS": str(self.deps),
                "FILES": str(self.files),
            },
        )
        took = time.monotonic() - started
        self.seconds[interp.name] = self.seconds.get(interp.name, 0.0) + took
        assert proc.returncode == 0, (
            f"{interp.name}: check_state.py {' '.join(args)} exited {proc.returncode}\n"
            f"{proc.stderr[-4000:]}"
        )
        return json.loads(proc.stdout)


def _copy_pure(deps: Path) -> None:
    """Copy the dependencies from the host venv; each must be pure Python."""
    for name in PURE_DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        assert spec is not None, f"{name} is not installed"
        assert spec.origin is not None, f"{name} has no file"
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            compiled = [
                p for p in origin.parent.rglob("*") if p.suffix in {".so", ".pyd", ".dylib"}
            ]
            assert not compiled, f"{name} is not pure Python: {compiled}"
            shutil.copytree(origin.parent, deps / name, ignore=shutil.ignore_patterns("*.pyc"))
        else:
            assert origin.suffix == ".py", f"{name} is not pure Python: {origin}"
            shutil.copy2(origin, deps / origin.name)


def _check_chroots() -> None:
    """Skip when the setup script never ran; fail when it ran but a chroot is unusable."""
    roots = {i.root for i in INTERPRETERS if i.root is not None}
    if not any(root.exists() for root in roots):
        pytest.skip(f"no interpreter chroots under {BASE}: {SETUP_HINT}")
    for interp in INTERPRETERS:
        if interp.root is None:
            continue
        assert (interp.root / "usr/bin" / f"python{interp.version}").exists(), (
            f"{interp.root} has no python{interp.version}: {SETUP_HINT}"
        )
        (interp.root / "p38" / "src").mkdir(parents=True, exist_ok=True)
        (interp.root / "p38" / "deps").mkdir(parents=True, exist_ok=True)
        (interp.root / "p38" / "run").mkdir(parents=True, exist_ok=True)
    assert os.geteuid() == 0, "chroot and bind mounts need root"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A fresh shared folder and dependency copies; the time spent per interpreter is noted."""
    _check_chroots()
    top = tmp_path_factory.mktemp("interpreters")
    lab = Lab(files=top / "files", deps=top / "deps", seconds={})
    lab.files.mkdir()
    lab.deps.mkdir()
    _copy_pure(lab.deps)
    yield lab
    times = ", ".join(f"{name} {s:.1f} s" for name, s in lab.seconds.items())
    summary.note(f"P-38 interpreters: time in check_state.py: {times}")


def _without_store(view: dict[str, Any]) -> dict[str, Any]:
    """A receipt+state view less what depends on the store id (its own per file)."""
    receipt = {k: v for k, v in view["receipt"].items() if k != "state_digest"}
    own = {"store_id", "state_digest"}
    state = {k: v for k, v in view["state"].items() if k not in own}
    return {"receipt": receipt, "state": state}


def test_same_state_same_digests_and_spelling(lab: Lab) -> None:
    """Every interpreter computes the same digests, identities and deadlines for the fixed state.

    The state digest is the SHA-256 of the state's exchange document, which spells every mapped
    prefix ``::ffff:a.b.c.d/len`` under every interpreter; how `ipaddress` spells it (CPython
    3.13 changed it) is noted in the summary, beside the library's `Vrp` text.
    """
    docs = {i.name: lab.run(i, "spelling") for i in INTERPRETERS}
    versions = {name: doc["python"] for name, doc in docs.items()}
    for interp in INTERPRETERS:
        assert versions[interp.name].startswith(interp.version + "."), versions
    first = docs[INTERPRETERS[0].name]
    for name, doc in docs.items():
        assert doc["fixed_state"] == first["fixed_state"], f"{name} differs from the host"
        assert doc["schema_version"] == first["schema_version"]
        assert doc["exchange_text"] == MAPPED_TEXT, name
        # The library's own text (logs, HTTP, SLURM documents) is the same everywhere too.
        assert doc["library_vrp_str"].startswith(MAPPED_TEXT + "-"), name
        assert doc["exchange_mapped"] == MAPPED_IN_DOCUMENT, name
        assert doc["exchange_sha256"] == doc["fixed_state"]["state_digest"], name
        summary.note(
            f"P-38 {name}: Python {doc['python']}, SQLite {doc['sqlite']}; "
            f"ipaddress {doc['ipaddress_str']!r}, Vrp text {doc['library_vrp_str']!r}, "
            f"exchange text {doc['exchange_text']!r}"
        )
    fixed = first["fixed_state"]
    summary.note(f"P-38 fixed state: state digest {fixed['state_digest']}")


def test_every_interpreter_reads_every_file(lab: Lab) -> None:
    """Each commits the fixed state to its own file; each reads all: receipts and views agree."""
    written: dict[str, Any] = {}
    for interp in INTERPRETERS:
        name = f"written-by-{interp.version}.sqlite"
        doc = lab.run(interp, "write", lab.path(interp, name))
        assert doc["read_back"] == doc["committed"], interp.name
        written[name] = doc["committed"]
    for interp in INTERPRETERS:
        views = lab.run(interp, "read", *(lab.path(interp, name) for name in written))
        assert set(views) == set(written)
        for name, view in views.items():
            assert view == written[name], f"{interp.name} reads {name} differently"
    for (a, va), (b, vb) in itertools.combinations(written.items(), 2):
        assert _without_store(va) == _without_store(vb), f"{a} and {b} differ beyond the store"


def test_owners_take_turns_on_one_file(lab: Lab) -> None:
    """3.11, 3.12, 3.13, 3.14 and 3.11 again commit in turn to one file.

    Each finds exactly what the one before committed, retrying that commit returns the original
    receipt (its digest of the state read equals the stored one), and its own commit is read by
    every interpreter as it was committed.
    """
    order = (*INTERPRETERS, INTERPRETERS[0])
    previous: dict[str, Any] | None = None
    for step, interp in enumerate(order):
        doc = lab.run(interp, "chain", lab.path(interp, "turns.sqlite"), str(step))
        assert doc["found"] == previous, f"{interp.name} found another state"
        if previous is None:
            assert doc["retried"] is None
        else:
            assert doc["retried"] == {"retried": True, "receipt": previous["receipt"]}, interp.name
        assert doc["committed"]["receipt"]["snapshot_id"] == f"7.{step + 1}"
        previous = doc["committed"]
    for interp in INTERPRETERS:
        views = lab.run(interp, "read", lab.path(interp, "turns.sqlite"))
        assert views == {"turns.sqlite": previous}, interp.name
