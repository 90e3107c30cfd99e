"""The operator's console: a live page (``GET /console``) and the JSON status behind it (``/console/status``).

``activity`` records what this replica served; ``status`` computes the shared picture once per
interval (every replica's activity, the queues and leases in Redis, the engines' metrics) and keeps
the charts' history in Redis; ``session`` is the login cookie; ``engine_metrics`` reads an engine's
Prometheus text. The page itself is static files in ``static/`` (no build step, no CDN).
"""
