"""The console's login, cookie and readiness hardening (issue 55 item 7), against real gateways on a
real Redis: the login throttle counts per user name as well as per address, in one step with its
check (a concurrent burst gets no more than its tries); the cookie is ``Secure`` behind a TLS proxy
(``--console-cookie-secure``, or a trusted ``X-Forwarded-Proto``); a malformed cookie is a 401,
never a 500; ``/ready`` without the admin key says ready or not, and nothing else."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from support.gateway_helpers import ADMIN_KEY, model_config
from support.servers import Server

ATTEMPTS, USER_ATTEMPTS = 3, 5


def _client(gw: Server, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections come from ``address`` (any 127/8 address reaches the loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=gw.url, timeout=10, follow_redirects=False, transport=transport)


def _login(gw: Server, key: str, address: str = "127.0.0.1", **extra: str) -> httpx.Response:
    with _client(gw, address) as client:
        return client.post("/console/login", data={"key": key, **extra.pop("form", {})}, headers=extra)  # type: ignore[arg-type]


def test_console_login_cookie_and_ready(start_gateway: Any, fake_upstream: Server) -> None:
    models = {"m": model_config(fake_upstream.url)}
    flags = ("--auth", "on", "--console-login-attempts", str(ATTEMPTS), "--console-login-window-s", "60")
    gw = start_gateway(models, *flags, "--console-login-user-attempts", str(USER_ATTEMPTS), "--trust-forwarded-proto")
    secure = start_gateway(models, "--auth", "on", "--console-cookie-secure")

    # the cookie: Secure when a trusted proxy says https, or always with --console-cookie-secure
    assert "Secure" not in _login(gw, ADMIN_KEY).headers["set-cookie"]
    behind = _login(gw, ADMIN_KEY, **{"X-Forwarded-Proto": "https", "Origin": "https://" + gw.url[7:]})
    assert behind.status_code == 303
    assert "; Secure" in behind.headers["set-cookie"]
    assert "; Secure" in _login(secure, ADMIN_KEY).headers["set-cookie"]
    assert _login(gw, ADMIN_KEY, Origin="https://" + gw.url[7:]).status_code == 403  # no proxy said https

    # malformed cookies: 401 (status) and the login page (console), never a 500
    for value in ("9" * 4300 + ".mac", ".mac", "1" * 13 + ".mac", "x" * 5000):
        with _client(gw) as client:
            client.cookies.set("genmesh_console", value, path="/console")
            assert client.get("/console/status").status_code == 401, value[:20]
            assert client.get("/console").headers["location"] == "/console/login"

    # /ready: ready or not, and nothing else, without the admin key; the detail with it
    assert httpx.get(gw.url + "/ready").json() == {"status": "ready"}
    detailed = httpx.get(gw.url + "/ready", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    assert detailed["status"] == "ready"
    assert "m" in detailed["upstreams"]

    # a burst of 12 wrong keys at once from one address: no more than its 3 tries are compared
    with ThreadPoolExecutor(12) as pool:
        burst = list(pool.map(lambda _: _login(gw, "wrong", "127.0.0.2").status_code, range(12)))
    assert sorted(burst) == [401] * ATTEMPTS + [429] * (12 - ATTEMPTS)
    refused = _login(gw, ADMIN_KEY, "127.0.0.2")
    assert refused.status_code == 429  # even the right key waits
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    # per user name: two more addresses make 5 failures for "admin" in all (the burst made 3)
    assert _login(gw, "wrong", "127.0.0.3").status_code == 401
    assert _login(gw, "wrong", "127.0.0.4").status_code == 401
    assert _login(gw, "wrong", "127.0.0.5").status_code == 429  # a fresh address, the same user name
    assert _login(gw, "wrong", "127.0.0.5", form={"user": "ops"}).status_code == 401  # another name counts apart
