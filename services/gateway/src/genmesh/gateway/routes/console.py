"""The console's routes: the page, its login, its static files and the JSON status behind it.

With auth on, the page and ``/console/status`` need the admin key: a form posts it once and gets a
signed HttpOnly, SameSite=Strict cookie (``console/session.py``); scripts may send it as a Bearer
token to ``/console/status`` instead. A key never travels in a URL. Every response carries a strict
Content-Security-Policy: the page runs only its own script and style, and renders data as text.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING
from urllib.parse import parse_qs
from uuid import uuid4

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from genmesh.protocol import OpenAIError

from ..admission.auth import check_admin
from ..console import session
from .common import gateway

if TYPE_CHECKING:
    from ..state import GatewayState

router = APIRouter(prefix="/console")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # not no-referrer: that makes a browser send "Origin: null" on the login
    "Cache-Control": "no-store",
}
STATUS_PATH = "/console/status"
STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
MAX_LOGIN_BYTES = 4096
LOGIN_ERROR = '<p class="error" role="alert">That is not the admin key.</p>'
TOO_MANY_LOGINS = '<p class="error" role="alert">Too many failed logins from this address: try again later.</p>'


@cache
def _asset(name: str) -> bytes:
    return files("genmesh.gateway.console").joinpath("static", name).read_bytes()


def _page(name: str, status: int = 200, error: str = "", headers: dict[str, str] | None = None) -> Response:
    body = _asset(name).replace(b"<!--error-->", error.encode())
    return Response(body, status, {**SECURITY_HEADERS, **(headers or {})}, media_type="text/html; charset=utf-8")


def _redirect(to: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=303, headers={**SECURITY_HEADERS, "Location": to, **(headers or {})})


def _signed_in(request: Request, st: GatewayState | None = None) -> bool:
    st = st or gateway(request)
    return not st.auth_required or session.valid(request.cookies.get(session.COOKIE), st.admin_key)


@router.get("", include_in_schema=False)
async def console_page(request: Request) -> Response:
    if not _signed_in(request):
        return _redirect("/console/login")
    return _page("console.html")


@router.get("/login", include_in_schema=False)
async def login_page(request: Request) -> Response:
    if not gateway(request).auth_required:
        return _redirect("/console")
    return _page("login.html")


def _cross_site(request: Request) -> bool:
    """A form posted from another site (CSRF): its browser says so, or names another origin."""
    origin = request.headers.get("origin")
    cross = request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none")
    return cross or (origin is not None and origin != f"{_scheme(request)}://{request.url.netloc}")


def _scheme(request: Request) -> str:
    """The scheme the browser used: the request's own, or a trusted proxy's ``X-Forwarded-Proto``."""
    if gateway(request).settings.trust_forwarded_proto:
        forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        if forwarded in ("http", "https"):
            return forwarded
    return request.url.scheme


def _secure(request: Request) -> bool:
    """Whether the cookie is marked ``Secure``: ``--console-cookie-secure``, or an https request."""
    return gateway(request).settings.console_cookie_secure or _scheme(request) == "https"


@router.post("/login", include_in_schema=False)
async def login(request: Request) -> Response:
    st = gateway(request)
    if _cross_site(request):
        return _page("login.html", 403, '<p class="error" role="alert">Cross-site login refused.</p>')
    if not st.auth_required:
        return _redirect("/console")
    address = request.client.host if request.client else ""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN_BYTES:
            return _page("login.html", 413, LOGIN_ERROR)
    form = parse_qs(body.decode("utf-8", "replace"))
    user = (form.get("user") or ["admin"])[0].strip()[:64] or "admin"  # the console has one account
    if wait := await st.login_throttle.take(address, user):  # counted before the key is compared
        return _page("login.html", 429, TOO_MANY_LOGINS, {"Retry-After": str(wait)})
    key = (form.get("key") or [""])[0].strip()
    try:
        check_admin(f"Bearer {key}", st.admin_key)
    except OpenAIError as err:
        return _page("login.html", err.status, LOGIN_ERROR)
    await st.login_throttle.give_back(address, user)
    assert st.admin_key is not None
    lifetime = int(st.settings.console_session_s)
    cookie = session.set_cookie_header(session.issue(st.admin_key, lifetime), lifetime, secure=_secure(request))
    return _redirect("/console", {"Set-Cookie": cookie})


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    if _cross_site(request):  # another site may not log the console out either
        return Response("Cross-site logout refused.", 403, SECURITY_HEADERS, media_type="text/plain; charset=utf-8")
    return _redirect("/console/login", {"Set-Cookie": session.set_cookie_header("", 0, _secure(request))})


@router.get("/static/{name}", include_in_schema=False)
async def static(name: str) -> Response:
    if name not in STATIC:
        return Response(status_code=404, headers=SECURITY_HEADERS)
    return Response(_asset(name), headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"}, media_type=STATIC[name])


@router.get("/status")
async def console_status(request: Request) -> Response:
    """The console's data (docs/console.md): the last snapshot, computed once per interval while viewed."""
    return await _status(gateway(request), request)


async def _status(st: GatewayState, request: Request) -> Response:
    if st.auth_required and not _signed_in(request, st):
        try:
            check_admin(request.headers.get("authorization"), st.admin_key)
        except OpenAIError as err:
            return JSONResponse(err.body(), err.status, headers=SECURITY_HEADERS)
    st.console.viewed()
    await st.console.wait_fresh()  # the first view after a quiet spell: the computation it woke
    return Response(st.console.body, headers=SECURITY_HEADERS, media_type="application/json")


async def serve_status(st: GatewayState, scope: Scope, receive: Receive, send: Send) -> None:
    """``GET /console/status`` as plain ASGI, before FastAPI (as the completion endpoints are): every open
    console polls it each second, and FastAPI's routing and middleware cost twice the answer. It keeps
    what a client sees of them: ``X-Request-ID`` echoed (or made), the same headers and errors."""
    rid = next((v.decode("latin-1")[:128] for k, v in scope["headers"] if k == b"x-request-id"), "") or uuid4().hex
    response = await _status(st, Request(scope, receive))
    response.headers["x-request-id"] = rid
    await response(scope, receive, send)
