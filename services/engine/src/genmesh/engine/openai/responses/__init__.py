"""The Responses API (``/v1/responses``) on top of chat: its input, output items and event stream."""
