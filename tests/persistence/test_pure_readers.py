"""The state's readers need only the standard library and the pure-Python dependencies (P-38).

The interpreter check (`interop-tests/test_interpreters.py`) runs
``interop-tests/interpreters/check_state.py`` under CPython chroots that get only the checkout and
copies of the pure-Python dependencies; a compiled module imported on the way (msgspec,
watchfiles, ...) fails it there. This runs the same script on the host in a child whose import
system refuses every module outside the standard library, the checkout's packages and those
dependencies, so ``make test`` sees such an import before the interop suite does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "interop-tests" / "interpreters" / "check_state.py"
#: What the chroots get besides the checkout (`test_interpreters.PURE_DEPENDENCIES`).
PURE = ("anyio", "sniffio", "idna", "typing_extensions")

CHILD = """
import runpy, sys

allowed = set(sys.stdlib_module_names) | set(sys.argv[2].split(",")) | {
    "persistence", "snapshot", "upstream", "rtr_server", "__main__",
}
refused = []

class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in allowed:
            refused.append(name)
            raise ImportError(f"{name} is neither standard nor a pure dependency")
        return None

sys.meta_path.insert(0, Refuse())
script = sys.argv[1]
sys.argv = [script, "spelling"]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    if refused:  # a standard module may try one (copy tries org.python.core) and go on
        print("refused:", ",".join(refused), file=sys.stderr)
"""


def test_check_state_runs_on_the_standard_library_and_pure_dependencies() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(SCRIPT), ",".join(PURE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    view = json.loads(proc.stdout)
    assert view, "check_state.py spelling printed an empty document"
