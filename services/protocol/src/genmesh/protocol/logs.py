"""Structured logs: one JSON object per line on stderr, each with the request id it belongs to."""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

from .asgi import RequestIdLogFilter

FIELDS = "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s"


def configure_logging(level: str, quiet: tuple[str, ...] = ("httpx",)) -> None:
    """JSON lines on stderr for every genmesh service; ``quiet`` loggers only say warnings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(JsonFormatter(FIELDS, rename_fields={"asctime": "time", "levelname": "level"}))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # httpx logs every upstream call at INFO; the access line already says what happened.
    for name in quiet:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))
