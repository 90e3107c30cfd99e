"""genmesh gateway: OpenAI-compatible front door with Redis-backed queues, leases, auth and limits."""

__version__ = "0.1.0"
