"""The backend contract suite: how a custom `PersistenceBackend` runs the tests ours pass (P-04).

Implementing methods of the same names is no claim of compatibility; passing these tests is.
They are the tests of `tests.persistence.test_contract` named in its ``__all__`` (SQLite and
DuckDB run exactly these functions there, through the same ``contract_backend`` fixture), on
real files in ``tmp_path``, each on asyncio and trio (the ``anyio_backend`` fixture of this
repository's ``tests/conftest.py``). From a checkout of rtr-serve, a backend author writes one
test module, for example ``tests/mybackend/test_my_contract.py``::

    import pytest

    from tests.persistence.contract_backend import ContractBackend
    from tests.persistence.contract_suite import *  # noqa: F403 - the suite's tests

    MINE = ContractBackend(
        name="mine",  # its BackendCapabilities.backend_name
        make=lambda path, wall: MyBackend(path, wall=wall),
        shared_read=False,  # its BackendCapabilities.shared_read
        ref="tests.mybackend.test_my_contract:MINE",  # importable by a subprocess
    )

    @pytest.fixture
    def contract_backend() -> ContractBackend:
        return MINE

and runs ``python -m pytest tests/mybackend -p no:cacheprovider``. ``make(path, wall)`` builds
an unopened owner on ``path`` whose wall clock is ``wall()`` (Unix seconds): the suite checks
stored write times against a fake clock. What the suite asks of the backend: the protocol's
calls and errors (`persistence.errors`), compare-and-swap commits with idempotent retries, one
owner per file (across paths, hard links and processes), closed calls refused, and the state
read back exactly (digests, every field, ``recovered_from`` included). Our SQL backends also
pass SQL-level tests (raw tampering, the shared DDL) that a non-SQL backend cannot run; those
are not part of this suite. `tests/persistence/test_contract_custom.py` is this very recipe,
run with every test run, for a backend that is neither of ours.
"""

from __future__ import annotations

from tests.persistence.test_contract import *  # noqa: F403 - re-exported: the suite
from tests.persistence.test_contract import __all__ as _suite

__all__ = list(_suite)
