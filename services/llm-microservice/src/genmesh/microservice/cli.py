"""``genmesh-microservice`` / ``python -m genmesh.microservice``: read the settings, then serve."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from genmesh.protocol.server.asgi import serve
from genmesh.protocol.server.logs import configure_logging
from genmesh.protocol.server.tracing import configure_tracing

from .app import create_app
from .settings import parse_settings

log = logging.getLogger("genmesh.microservice")


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    tracer = configure_tracing("genmesh-microservice", log_level=settings.log_level, limits=settings.tracing_limits())
    log.info(
        "relaying to %s (default model %s) on %s:%d",
        settings.llm_endpoint,
        settings.llm_model_id or "<the engine's>",
        settings.host,
        settings.port,
    )
    try:
        serve(create_app(settings), settings.host, settings.port, settings.log_level, limits=settings.http_limits())
    finally:
        tracer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
