"""The OpenAI surface: the ASGI app, its routes, and every request feature from intake to reply.

It holds the served models (``registry``, ``loaded_model``: each loaded model carries its prompt
tokenizer, chat template and tool handling), and sits on top: nothing else in the engine imports it.
"""
