"""Structured logs: one JSON object per line on stderr, each with the request id (and trace id) it belongs to."""

from __future__ import annotations

import contextvars
import logging
import sys

from pythonjsonlogger.json import JsonFormatter

from .tracing import current_trace_id

FIELDS = "%(asctime)s %(levelname)s %(name)s %(request_id)s %(trace_id)s %(message)s"

# The request a line of log belongs to: set per request by the ASGI middleware (asgi.py).
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.trace_id = current_trace_id()  # "-" unless tracing is on and the line belongs to a trace
        return True


def configure_logging(level: str, quiet: tuple[str, ...] = ("httpx",)) -> None:
    """JSON lines on stderr for every genmesh service; ``quiet`` loggers only say warnings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(JsonFormatter(FIELDS, rename_fields={"asctime": "time", "levelname": "level"}))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # httpx logs every upstream call at INFO; the access line already says what happened.
    for name in quiet:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))
