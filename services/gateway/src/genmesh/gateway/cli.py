"""``genmesh-gateway`` / ``python -m genmesh.gateway``: load the routing config, then serve."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import uvicorn
from pydantic import ValidationError

from genmesh.protocol.logs import configure_logging

from .app import create_app
from .config import load_config
from .settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    try:
        config = load_config(settings.config)
    except (OSError, ValueError, ValidationError) as exc:
        print(f"genmesh-gateway: cannot load routing config {settings.config}: {exc}", file=sys.stderr)
        return 2
    app = create_app(settings, config)
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
