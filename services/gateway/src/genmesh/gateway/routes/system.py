"""``/health`` (liveness), ``/ready`` (Redis and an upstream per model; the detail for the admin key
only), ``/metrics``."""

from __future__ import annotations

import contextlib

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError

from ..admission.auth import check_admin
from ..redis.client import RedisUnavailable
from .common import gateway

router = APIRouter()


@router.get("/health")
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    """Ready or not, for orchestrators (no key needed); what it depends on (Redis, the upstreams by
    model and address) only for the admin key, or when API keys are off (loopback)."""
    st = gateway(request)
    ok, detail = await st.ready()
    if st.auth_required:
        try:
            check_admin(request.headers.get("authorization"), st.admin_key)
        except OpenAIError:
            detail = {}
    if ok:
        return JSONResponse({"status": "ready", **detail})
    return JSONResponse({"status": "not_ready", **detail}, status_code=503, headers={"Retry-After": "1"})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    st = gateway(request)
    m = st.metrics
    with contextlib.suppress(RedisError, OSError, RedisUnavailable):
        for (model, prio), depth in (await st.admission.depths()).items():
            m.queue_depth.labels(model, str(prio)).set(depth)
        for (model, up), n in (await st.admission.in_flight()).items():
            m.in_flight.labels(model, up).set(n)
        for (model, kind), depth in (await st.admission.depths_by_kind()).items():
            m.queue_depth_kind.labels(model, kind).set(depth)
        running = await st.admission.batch_running()
        unfinished = await st.batches.unfinished()
        for model in st.config.models:
            m.batch_running.labels(model).set(running.get(model, 0))
            m.batch_queued.labels(model).set(max(0, unfinished.get(model, 0) - running.get(model, 0)))
    for model, pool in st.pool.models.items():
        m.peers.labels(model).set(st.admission.peers(model))
        for u in pool:
            m.healthy.labels(model, u.name).set(1 if u.available() else 0)
    return Response(m.render(), media_type=CONTENT_TYPE_LATEST)
