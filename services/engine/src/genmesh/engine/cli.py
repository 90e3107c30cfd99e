"""``genmesh-engine`` / ``python -m genmesh.engine``: find the models to serve, then serve.

The web parts (FastAPI, uvicorn) are imported in ``main``, not here: the engine core process is
spawned, and a spawned child runs the parent's ``__main__`` again, which for the console script
imports this module. The core process stays free of web code (tests/engine/unit/test_core_imports.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from genmesh.protocol.server.logs import configure_logging
from genmesh.protocol.server.tracing import configure_tracing

from .models import ovms_config
from .models.source import ModelSourceError
from .settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    from genmesh.protocol.server.asgi import ShutdownSwitch, serve

    from .openai.app import create_app

    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    tracer = configure_tracing("genmesh-engine", log_level=settings.log_level, limits=settings.tracing_limits())
    try:
        models = ovms_config.load(settings)
    except (ModelSourceError, ovms_config.RepositoryError) as exc:
        print(f"genmesh-engine: {exc}", file=sys.stderr)
        return 2
    switch = ShutdownSwitch()
    app = create_app(settings, models, switch)
    try:
        return serve(app, settings.host, settings.port, settings.log_level, switch, settings.http_limits())
    finally:
        tracer.shutdown()


if __name__ == "__main__":
    sys.exit(main())
