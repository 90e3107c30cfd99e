"""What every genmesh service's HTTP side shares, apart from the wire format (``genmesh.protocol``).

* ``app``: the FastAPI app every service builds (middleware order, lifespan, version);
* ``metrics``: each service's Prometheus metrics in a registry of its own;
* ``asgi``: the FastAPI app's middleware (request id, body limit), error handlers and ``serve``;
* ``streaming``: a streamed reply whose body goes around the middleware (one ASGI call per chunk);
* ``http_server``: uvicorn's HTTP protocol with the limits hostile clients need;
* ``inputs``: request bodies decoded and checked before any work;
* ``limits``: the HTTP limits, a typed setting of every service;
* ``settings``: the base of every service's settings, read from flags and environment;
* ``logs``: JSON log lines with the request id (also used by the engine core, so it imports no
  web framework).

Nothing here is imported by ``genmesh.protocol`` itself: the wire models load without FastAPI
or uvicorn, and so does the engine core process (``tests/engine/unit/test_core_imports.py``).
"""
