"""HTTP routes of the gateway: OpenAI endpoints, admin endpoints, health and metrics."""
