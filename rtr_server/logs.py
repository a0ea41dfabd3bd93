"""Log output: `configure` installs one stderr handler writing text lines or JSON objects.

Every record becomes one line. In JSON each line is an object with ``ts`` (RFC 3339, UTC),
``level``, ``logger`` and ``msg``, followed by the record's structured fields: whatever the
caller passed as ``extra=`` (by convention ``{"event": "<name>", ...facts}``). The text format
carries the same facts inside the message, so both formats tell an operator the same story.
"""

from __future__ import annotations

import enum
import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, TextIO

#: Values of ``--log-format`` and ``--log-level``.
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")

#: The keys every JSON line starts with; structured fields never overwrite them.
BASE_KEYS = ("ts", "level", "logger", "msg")

#: Libraries that log every request at INFO; shown only at debug level.
CHATTY_LOGGERS = ("httpx", "httpcore")

#: Attributes every `logging.LogRecord` has; any other attribute came in through ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
}


@dataclass(frozen=True, slots=True)
class LogSettings:
    """How the process logs: a level name and a format name (both validated)."""

    level: str = "info"
    format: str = "text"

    def __post_init__(self) -> None:
        if self.level not in LOG_LEVELS:
            raise ValueError(f"log level {self.level!r} is not one of {', '.join(LOG_LEVELS)}")
        if self.format not in LOG_FORMATS:
            raise ValueError(f"log format {self.format!r} is not one of {', '.join(LOG_FORMATS)}")


def rfc3339(timestamp: float) -> str:
    """``timestamp`` (Unix seconds) in RFC 3339 UTC with milliseconds: ``...T09:31:33.120Z``."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record was given through ``extra=``."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
    }


def _jsonable(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, PurePath | bytes):
        return str(value) if isinstance(value, PurePath) else value.hex()
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``msg``, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Serialise ``record``; values JSON cannot hold (enums, paths, ...) become strings."""
        line: dict[str, Any] = {
            "ts": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in fields_of(record).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=_jsonable, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``<RFC 3339 UTC time> <LEVEL> <logger>: <message>``, for people and journald."""

    def __init__(self) -> None:
        """Fix the line layout."""
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(  # noqa: N802 - the logging API's name
        self,
        record: logging.LogRecord,
        datefmt: str | None = None,  # noqa: ARG002 - the logging API's signature; layout is fixed
    ) -> str:
        """The record's time in RFC 3339 UTC."""
        return rfc3339(record.created)


class _ServeHandler(logging.StreamHandler[TextIO]):
    """The handler `configure` owns (found again, not duplicated, when reconfiguring)."""


def make_formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``text`` or ``json``."""
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(settings: LogSettings, stream: TextIO | None = None) -> None:
    """Log everything at ``settings.level`` and above to ``stream`` (stderr) in its format.

    Calling it again (a reload) changes the level and format of the same handler. The
    per-request lines of the HTTP library appear only at ``debug``.
    """
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _ServeHandler)), None)
    if handler is None:
        handler = _ServeHandler(stream or sys.stderr)
        root.addHandler(handler)
    elif stream is not None:
        handler.setStream(stream)
    handler.setFormatter(make_formatter(settings.format))
    root.setLevel(settings.level.upper())
    chatty = logging.DEBUG if settings.level == "debug" else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(chatty)
