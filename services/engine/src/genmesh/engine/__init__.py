"""genmesh engine: an OpenAI-compatible server over OpenVINO GenAI continuous batching.

The package imports nothing on its own: the engine core process (``core/``) loads only what
it needs, and no web framework (``.importlinter``). The API process starts
from ``cli.py``; its app is ``openai.app.create_app``.
"""
