"""The console's login cookie: an expiry and an HMAC of it keyed by the admin key. Nothing is stored.

Why an HMAC and not a session id in Redis: the console must still open (and show its Redis-outage
banner) while Redis is down; changing the admin key logs every console out at once; and the
cookie carries no secret (the key cannot be recovered from it). The cost: logging out clears the
browser's cookie but cannot revoke a copy of it before it expires (``console_session_s``).
"""

from __future__ import annotations

import hashlib
import hmac
import time

COOKIE = "genmesh_console"
MAX_EXPIRY_DIGITS = 12


def _mac(admin_key: str, expires: int) -> str:
    return hmac.new(admin_key.encode(), f"genmesh-console|{expires}".encode(), hashlib.sha256).hexdigest()


def issue(admin_key: str, lifetime_s: float) -> str:
    expires = int(time.time() + lifetime_s)
    return f"{expires}.{_mac(admin_key, expires)}"


def valid(cookie: str | None, admin_key: str | None) -> bool:
    if not cookie or not admin_key:
        return False
    expires, _, mac = cookie.partition(".")
    # an expiry is a Unix time: ASCII digits, a few of them (a 4,300-digit one would not even parse)
    if not (0 < len(expires) <= MAX_EXPIRY_DIGITS and expires.isascii() and expires.isdigit()):
        return False
    if int(expires) < time.time():
        return False
    return hmac.compare_digest(mac.encode(), _mac(admin_key, int(expires)).encode())


def set_cookie_header(value: str, max_age_s: int, secure: bool) -> str:
    attrs = f"{COOKIE}={value}; Path=/console; Max-Age={max_age_s}; HttpOnly; SameSite=Strict"
    return attrs + ("; Secure" if secure else "")
