"""The ``rtr-serve`` command: subcommands, logging, signals, the event loop, the exit status.

The options are `rtr_server.cli_args`, their checks and the ``--config`` merge
`rtr_server.cli_config`.

Bad arguments exit with status 2 and one line saying what is wrong, before any file or network
is touched. SIGTERM and SIGINT stop the server in order (`App.stop`): with ``--state`` the last
published state is committed within ``--flush-timeout`` (a second signal stops that wait), then
v2 routers are told Cache Restart (or Cache Shutdown with ``--shutdown-notice shutdown``); the
process exits 0, or 1 when that state could not be persisted. SIGHUP reloads the ``--config``
file (see `rtr_server.reload`). SIGUSR2 restarts without losing routers: the listeners and the
idle plain-TCP router connections are handed over, the state is closed as at a stop, and the
same command is re-executed in the same process (`rtr_server.handover`).
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import anyio
from anyio.abc import TaskStatus

from persistence.errors import PersistenceError
from rtr_server import __version__
from rtr_server.app import App, run_app
from rtr_server.app_config import AppConfig
from rtr_server.cli_args import build_check_config_parser, build_parser
from rtr_server.cli_config import check_config, load_process_config
from rtr_server.continuity import served_token
from rtr_server.fd_limit import fitted
from rtr_server.handover import exec_handed, hand_over
from rtr_server.logs import configure
from rtr_server.reload import ProcessConfig, Reloader
from upstream.closing import ShutdownReport
from upstream.source import SourceSetupError

log = logging.getLogger("rtr_server")

#: The subcommands besides serving: (module, function taking the rest of the command line).
SUBCOMMANDS = {
    "gen-cert": ("rtr_server.gen_cert", "main"),
    "state": ("rtr_server.state_command", "main"),
    "dump": ("rtr_server.dump_command", "main"),
    "compare": ("rtr_server.compare_command", "main"),
    "ssh-password": ("rtr_server.cli_ssh", "password_main"),
}


E = TypeVar("E", bound=BaseException)


def _persistence_error(exc: BaseException) -> PersistenceError | None:
    """The persistence refusal inside ``exc`` (possibly wrapped in exception groups)."""
    return _inner(exc, PersistenceError)


def _inner(exc: BaseException, kind: type[E]) -> E | None:
    """The one ``kind`` error inside ``exc`` (possibly wrapped in exception groups)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _inner(exc.exceptions[0], kind)
    return None


async def _serve(
    process: ProcessConfig, load: Callable[[], ProcessConfig] | None, origin: str
) -> tuple[ShutdownReport | None, list[tuple[int, str]] | None, str | None]:
    """Run the app with its reloader until a stop signal.

    Returns how the stop ended (None: early) and, after SIGUSR2, what to hand to the exec,
    with what was served last (`rtr_server.continuity.served_token`; None: nothing).
    """
    async with anyio.create_task_group() as tg:
        stopper = _Stopper(tg.cancel_scope)
        await tg.start(stopper.run, name="stop signals")
        await tg.start(stopper.restarts, name="restart signal")
        with anyio.open_signal_receiver(signal.SIGHUP) as hangups:
            stopper.app = await tg.start(_run_app, process.app, tg.cancel_scope)
            with stopper.reloads:  # the first stop signal ends reloading
                reloader = Reloader(
                    stopper.app, process, load, origin=origin, rekey=stopper.app.server.rekey
                )
                await reloader.serve(hangups)
            await anyio.sleep_forever()  # until the app has closed in order (it cancels tg)
    app = stopper.app
    if app is None:
        return None, stopper.handed, None
    served = app.publishing.current
    return app.shutdown, stopper.handed, None if served is None else served_token(served)


async def _run_app(
    config: AppConfig, scope: anyio.CancelScope, *, task_status: TaskStatus[App]
) -> None:
    """`run_app`; once it returned (an orderly stop), the rest is cancelled.

    A failure is not followed by a cancel: before the app started it is raised by `tg.start`,
    after that the task group cancels the rest itself (a cancel here would swallow a refusal
    at start, e.g. a state file that cannot be used, and exit 0).
    """
    await run_app(config, task_status=task_status)
    scope.cancel()


class _Stopper:
    """SIGTERM/SIGINT: the first stops the app in order, a second stops the final wait.

    A signal before the app runs (during recovery) cancels the start.
    """

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.reloads = anyio.CancelScope()
        self.app: App | None = None
        self.stopping = False
        #: What SIGUSR2 hands to the re-executed process (None: no restart asked).
        self.handed: list[tuple[int, str]] | None = None

    async def restarts(self, *, task_status: TaskStatus[None]) -> None:
        """SIGUSR2: hand the listeners and routers over, then stop in order (main execs)."""
        with anyio.open_signal_receiver(signal.SIGUSR2) as signals:
            task_status.started()
            async for _ in signals:
                if self.app is None or self.stopping:
                    log.warning("received SIGUSR2 while starting or stopping: ignored")
                    continue
                self.stopping = True
                log.info("received SIGUSR2: restarting without losing routers")
                self.reloads.cancel()
                http = self.app.config.http
                http_fd = None if http is None else http.inherited_fd
                self.handed = await hand_over(self.app.server, http_fd)
                self.app.stop()
                return

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                if self.app is None:
                    log.info("received %s: shutting down", name)
                    self.scope.cancel()
                    return
                if not self.stopping:
                    self.stopping = True
                    log.info("received %s: shutting down", name)
                    self.reloads.cancel()
                    self.app.stop()
                    continue
                log.warning(
                    "received %s again: no longer waiting for the state to be persisted", name
                )
                self.app.abort_stop(f"the wait was cut short by a second {name}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rtr-serve`` console script."""
    # cryptography 51 deprecates DSA, whose key classes asyncssh 2.24 still names when it is
    # imported (we neither offer nor accept DSA keys): no warning for operators to puzzle over.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module="asyncssh")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check-config"]:
        return check_config(build_check_config_parser().parse_args(argv[1:]).file)
    if argv[:1] and argv[0] in SUBCOMMANDS:
        # Imported only when asked for: serving starts without their imports.
        module, function = SUBCOMMANDS[argv[0]]
        command: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
        return command(argv[1:])
    parser = build_parser()
    try:
        args, process = load_process_config(parser, argv)
    except ValueError as exc:
        parser.error(str(exc))
    configure(process.logging)
    process = replace(process, app=fitted(process.app))
    config = process.app
    log.info(
        "rtr-serve %s starting on %s (%s)",
        __version__,
        ", ".join(a.describe() for a in config.server.listen),
        args.async_backend,
    )

    def reload_config() -> ProcessConfig:
        reloaded = load_process_config(parser, argv)[1]
        return replace(reloaded, app=fitted(reloaded.app))

    load = reload_config if args.config is not None else None
    # Until the event loop listens for it, a SIGHUP (an early `systemctl reload`) would kill
    # the process: ignore it; `_serve` then handles every SIGHUP.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # the same for an early restart signal
    report: ShutdownReport | None = None
    handed: list[tuple[int, str]] | None = None
    served: str | None = None
    try:
        report, handed, served = anyio.run(
            _serve, process, load, str(args.config), backend=args.async_backend
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        log.error("cannot serve: %s", exc)
        return 1
    except (PersistenceError, SourceSetupError, BaseExceptionGroup) as exc:
        setup = _inner(exc, SourceSetupError)
        if setup is not None:
            # A configuration that can never work (checked before any network activity).
            log.error("cannot start: %s", setup)
            return 2
        refusal = _persistence_error(exc)
        if refusal is None:
            raise
        log.error("cannot use state %s: %s", config.state, refusal)
        return 1
    if handed is not None:
        exec_handed(handed, served)  # returns only when the exec failed:
        return main(argv)  # then serve on here, adopting what was handed over
    if report is not None and report.persisted is False:
        log.info("rtr-serve stopped (exit status 1: the last published state is not persisted)")
        return 1
    log.info("rtr-serve stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
