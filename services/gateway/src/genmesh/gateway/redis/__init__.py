"""The gateway's Redis: the client, its key names and its Lua scripts (``lua/``)."""
