"""genmesh llm-microservice: the OPEA-style wrapper that normalises requests and relays them to the engine."""

from .app import create_app
from .settings import MicroserviceSettings, parse_settings

__all__ = ["MicroserviceSettings", "create_app", "parse_settings"]
