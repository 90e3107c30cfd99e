"""``genmesh-engine`` / ``python -m genmesh.engine``: resolve the model, then serve."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import uvicorn

from genmesh.protocol.logs import configure_logging

from .app import create_app
from .model_source import ModelSourceError, resolve
from .settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    try:
        source = resolve(settings.model, settings.served_model_name, settings.max_model_len)
    except ModelSourceError as exc:
        print(f"genmesh-engine: {exc}", file=sys.stderr)
        return 2
    app = create_app(settings, source)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
