"""genmesh engine: an OpenAI-compatible server over OpenVINO GenAI continuous batching."""

from .app import create_app
from .settings import EngineSettings, parse_settings

__all__ = ["EngineSettings", "create_app", "parse_settings"]
