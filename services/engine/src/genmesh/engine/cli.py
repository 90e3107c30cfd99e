"""``genmesh-engine`` / ``python -m genmesh.engine``: find the models to serve, then serve."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from genmesh.protocol.asgi import ShutdownSwitch, serve
from genmesh.protocol.logs import configure_logging

from . import repository
from .app import create_app
from .model_source import ModelSourceError
from .settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    try:
        models = repository.load(settings)
    except (ModelSourceError, repository.RepositoryError) as exc:
        print(f"genmesh-engine: {exc}", file=sys.stderr)
        return 2
    switch = ShutdownSwitch()
    app = create_app(settings, models, switch)
    return serve(app, settings.host, settings.port, settings.log_level, switch, settings.http_limits())


if __name__ == "__main__":
    sys.exit(main())
