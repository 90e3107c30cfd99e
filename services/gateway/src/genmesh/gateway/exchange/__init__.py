"""One request's way through the gateway, below both the HTTP routes and the batch runner.

``exchange.py`` (:class:`Exchange`: admission, the upstream call, relaying and metering),
``responses.py`` (the Responses API's exchange), ``dispatch.py`` (connecting to an upstream,
failover), ``errors.py`` (admission failures as OpenAI errors, authentication).
"""
