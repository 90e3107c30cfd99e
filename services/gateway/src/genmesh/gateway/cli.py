"""``genmesh-gateway`` / ``python -m genmesh.gateway``: load the routing config, then serve."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pydantic import ValidationError

from genmesh.protocol.server.asgi import serve
from genmesh.protocol.server.logs import configure_logging
from genmesh.protocol.server.tracing import configure_tracing

from .app import create_app
from .routing.config import load_config
from .settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    tracer = configure_tracing(
        "genmesh-gateway", settings.trace_content, settings.log_level, limits=settings.tracing_limits()
    )
    try:
        settings.admin_secret()
    except OSError as exc:
        print(f"genmesh-gateway: cannot read the admin key file: {exc}", file=sys.stderr)
        return 2
    try:
        config = load_config(settings.config)
    except (OSError, ValueError, ValidationError) as exc:
        print(f"genmesh-gateway: cannot load routing config {settings.config}: {exc}", file=sys.stderr)
        return 2
    app = create_app(settings, config)
    try:
        serve(app, settings.host, settings.port, settings.log_level, limits=settings.http_limits())
    finally:
        tracer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
