"""``genmesh-microservice`` / ``python -m genmesh.microservice``: read the settings, then serve."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import uvicorn

from genmesh.protocol.logs import configure_logging

from .app import create_app
from .settings import parse_settings

log = logging.getLogger("genmesh.microservice")


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    log.info(
        "relaying to %s (default model %s) on %s:%d",
        settings.llm_endpoint,
        settings.llm_model_id or "<the engine's>",
        settings.host,
        settings.port,
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep our JSON handler; uvicorn's loggers propagate to it
        log_level=settings.log_level.lower(),
        access_log=False,  # ObserveMiddleware writes the access lines
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
