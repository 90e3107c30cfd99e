"""genmesh engine: an OpenAI-compatible server over OpenVINO GenAI continuous batching.

The package imports nothing on its own: the engine core process (``core/``) loads only what
it needs, and no web framework (import contracts in pyproject.toml, checked by ``lint-imports``;
``tests/engine/unit/test_core_imports.py``). The API process starts from ``cli.py``; its app is
``openai.app.create_app``. docs/architecture.md ("The engine's layout") shows the subpackages.
"""
