"""genmesh engine: an OpenAI-compatible server over OpenVINO GenAI continuous batching.

The package imports nothing on its own: the engine core process (``core.py``) loads only what
it needs, and no web framework (``tests/engine/test_core_imports.py``). The API process starts
from ``cli.py``; its app is ``app.create_app``.
"""
