"""The console (GET /console) in a real headless Chromium, over a real gateway, Redis and engine.

One gateway serves the real model through two upstreams of one slot each: the engine itself, and a
microservice of this test's own in front of it (killed to watch the page turn it unhealthy).
"""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from genmesh.engine.metrics import MetricFamilies
from genmesh.gateway.console import engine_metrics
from genmesh.gateway.console.sections import drafting
from support.batches import chat_line, client, submit
from support.browser import browser
from support.gateway_helpers import ADMIN_KEY, RedisServer, StartGateway, auth, model_config, private_redis
from support.hostile import start_microservice
from support.polling import wait_until
from support.servers import MODEL_NAME, Server, free_port


# A Redis of this module's own. The session's shared gateways (``shared_gateway``, the embeddings mesh's) live
# on the session Redis for the whole run, and every gateway runs a batch runner and publishes console activity:
# there they would claim this module's batch lines (and fail them: they route other models) and count as
# replicas on the console.
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from private_redis(tmp_path_factory)


__all__ = ["browser"]

XSS_TENANT = "<img src=x onerror=alert(1)>"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
NOTES_SCREENSHOT = Path("/work/notes/console.png")
SCHEMA = json.loads(files("genmesh.gateway.console").joinpath("status.schema.json").read_text())
CSP_PARTS = (
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "connect-src 'self'",
    "frame-ancestors 'none'",
)


@pytest.fixture
def own_microservice(engine_url: str, tmp_path: Path) -> Iterator[Server]:
    server = start_microservice(tmp_path, engine_url)
    yield server
    server.stop()


def status(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/console/status", headers=ADMIN, timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def new_key(url: str, tenant: str, **limits: int) -> str:
    r = httpx.post(url + "/admin/keys", json={"tenant": tenant, **limits}, headers=ADMIN, timeout=10)
    assert r.status_code == 201, r.text
    secret: str = r.json()["api_key"]
    return secret


def cells(driver: WebDriver, table: str) -> list[list[str]]:
    """A table's cells as text, read in one script (the page redraws every second)."""
    script = "return [...document.querySelectorAll(arguments[0])].map(r => [...r.cells].map(c => c.textContent))"
    rows: list[list[str]] = driver.execute_script(script, f"#{table} tbody tr")
    return rows


def log_in(driver: WebDriver, url: str, key: str) -> None:
    driver.get(url + "/console")
    field = driver.find_element(By.ID, "key")
    field.send_keys(key)
    field.submit()


def stream(url: str, key: str, max_tokens: int, results: list[int]) -> None:
    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Count from one to one hundred in words."}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=auth(key), timeout=120) as r:
        for _ in r.iter_bytes():
            pass
        results.append(r.status_code)


def test_console_live_in_chromium(
    browser: WebDriver, start_gateway: StartGateway, engine_url: str, own_microservice: Server, tmp_path: Path
) -> None:
    models = {
        MODEL_NAME: {
            "upstreams": [
                {"url": engine_url, "name": "engine", "max_concurrency": 1},
                {
                    "url": own_microservice.url,
                    "name": "micro",
                    "max_concurrency": 1,
                    "health_path": "/v1/health_check",
                    "metrics_url": engine_url + "/metrics",
                },
            ],
            "max_queue_length": 64,
            "max_queue_wait_s": 120,
        }
    }
    gw = start_gateway(models, "--auth", "on", "--batch-poll-interval-s", "0.2")
    alice = new_key(gw.url, "alice", rpm=1000, tpm=100000, max_concurrent=8)
    xss = new_key(gw.url, XSS_TENANT)

    # a wrong key: an error, no cookie, and nothing of the key on the page or in the URL
    log_in(browser, gw.url, "wrong-key-do-not-echo")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".error"), 10, what="the login error")
    assert "not the admin key" in browser.find_element(By.CSS_SELECTOR, ".error").text
    assert "wrong-key-do-not-echo" not in browser.page_source
    assert "key" not in browser.current_url.split("/console")[-1].replace("login", "")
    assert browser.get_cookies() == []

    log_in(browser, gw.url, ADMIN_KEY)
    wait_until(lambda: cells(browser, "upstreams") and len(cells(browser, "upstreams")[0]) > 2, 20, what="the console")
    assert ADMIN_KEY not in browser.current_url
    (cookie,) = browser.get_cookies()
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert ADMIN_KEY not in cookie["value"]

    # traffic: two slots, twelve streams from two tenants; some must wait
    results: list[int] = []
    threads = [
        threading.Thread(target=stream, args=(gw.url, alice if i % 2 else xss, 48, results), daemon=True)
        for i in range(12)
    ]
    for t in threads:
        t.start()
    batch = submit(client(gw.url, alice), [chat_line(f"c{i}", max_tokens=8) for i in range(6)])

    def queued_on_page() -> bool:
        rows = cells(browser, "models")
        return bool(rows) and rows[0][1].isdigit() and int(rows[0][1]) > 0

    wait_until(queued_on_page, 60, what="a queued request on the page")
    tenants = [row[1] for row in cells(browser, "tenants")]
    assert {"alice", XSS_TENANT} & set(tenants), tenants

    def charts_have_data() -> bool:
        s = status(gw.url)
        return len(s["history"]["queue_depth"]) >= 5 and s["models"][0]["tokens_per_s"] > 0

    wait_until(charts_have_data, 60, what="chart samples and tokens/s for the screenshot")
    shot = tmp_path / "console.png"
    assert browser.save_screenshot(str(shot))
    if NOTES_SCREENSHOT.parent.is_dir():
        shutil.copy(shot, NOTES_SCREENSHOT)

    for t in threads:
        t.join(180)
    assert results.count(200) == 12, results
    wait_until(lambda: cells(browser, "models")[0][1] == "0", 20, what="the queue drained on the page")

    # the numbers on the page are the status endpoint's (quiet now: poll until one snapshot is on both)
    def mismatches() -> list[tuple[str, str, str]]:
        """(what, on the page, in the status) for each number that differs."""
        s = status(gw.url)
        model = s["models"][0]
        row = cells(browser, "models")[0]
        alice_status = next(k for k in s["keys"] if k["tenant"] == "alice")
        alice_row = next(r for r in cells(browser, "keys") if r[0] == "alice")
        up_rows = {r[1]: r for r in cells(browser, "upstreams")}
        kv = s["upstreams"][0]["engine"]["kv_cache_usage"]
        pairs = [
            ("model", row[0], model["model"]),
            ("waiting", row[1], str(model["waiting"])),
            ("running", row[4], "  ".join(f"{r['upstream']} {r['running']}/{r['capacity']}" for r in model["running"])),
            ("alice requests", alice_row[2], f"{alice_status['requests']} / 1000"),
            ("alice tokens", alice_row[3], f"{alice_status['tokens']} / 100000"),
            ("alice concurrent", alice_row[4], f"{alice_status['concurrent']} / 8"),
            ("kv cache", f"{float(up_rows['engine'][5].rstrip('%')):.0f}", f"{kv * 100:.0f}"),
        ]
        pairs += [
            (f"{u['upstream']} health", up_rows[u["upstream"]][2], "healthy" if u["healthy"] else "unhealthy")
            for u in s["upstreams"]
        ]
        return [p for p in pairs if p[1] != p[2]]

    last: list[list[tuple[str, str, str]]] = [[]]

    def page_matches_status() -> bool:
        last[0] = mismatches()
        return not last[0]

    try:
        wait_until(page_matches_status, 20, what="the page to show the status endpoint's numbers")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; (what, page, status): {last[0]}") from None
    s = status(gw.url)
    jsonschema.validate(s, SCHEMA)
    assert s["models"][0]["ttft_p50_s"] is not None
    assert s["models"][0]["queue_wait_p99_s"] is not None
    assert s["upstreams"][0]["engine"]["reachable"]
    assert s["upstreams"][0]["engine"]["kv_cache_usage"] is not None

    # the batch, on the page with its progress, to the end
    def batch_row() -> list[str]:
        return next((r for r in cells(browser, "batches") if r[0] == batch.id), [])

    wait_until(lambda: batch_row()[3:4] == ["completed"], 120, what="the batch completed on the page")
    assert batch_row()[1:3] == ["alice", "/v1/chat/completions"]
    assert batch_row()[4:] == ["100%", "6 / 0 / 6"]

    # the XSS tenant is text, never markup: no <img> in the page, no alert
    key_rows = {r[0]: r for r in cells(browser, "keys")}
    assert XSS_TENANT in key_rows
    assert browser.find_elements(By.TAG_NAME, "img") == []
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text

    # a killed upstream turns unhealthy on the page within seconds
    own_microservice.proc.kill()
    killed = time.monotonic()
    wait_until(
        lambda: {r[1]: r[2] for r in cells(browser, "upstreams")}.get("micro") == "unhealthy",
        10,
        what="the killed upstream shown unhealthy",
    )
    print(f"\n[killed upstream unhealthy on the page after {time.monotonic() - killed:.1f} s]")
    assert {r[1]: r[2] for r in cells(browser, "upstreams")}["engine"] == "healthy"

    # its circuit cell names its last transition's cause (failed probes, then the cool-down's end), as the status does
    def circuit_shown() -> tuple[str, str]:
        u = next(u for u in status(gw.url)["upstreams"] if u["upstream"] == "micro")
        page = {r[1]: r[3] for r in cells(browser, "upstreams")}["micro"]
        return page, f"{u['circuit']} · {u['circuit_cause'].replace('_', ' ')}"

    wait_until(lambda: len(set(circuit_shown())) == 1, 10, what="the page to show the status's circuit and cause")
    assert circuit_shown()[0] in ("open · probe", "half-open · cooldown")


def test_console_headers_and_auth(start_gateway: StartGateway, fake_upstream: Server) -> None:
    gw = start_gateway({"m": model_config(fake_upstream.url)}, "--auth", "on")
    with httpx.Client(base_url=gw.url, timeout=10, follow_redirects=False) as client:
        assert client.get("/console").headers["location"] == "/console/login"
        denied = client.get("/console/status")
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_admin_key"
        wrong = client.post("/console/login", data={"key": "nope-secret"})
        assert wrong.status_code == 401
        assert "nope-secret" not in wrong.text
        assert "set-cookie" not in wrong.headers
        cross = client.post("/console/login", data={"key": ADMIN_KEY}, headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403
        assert "set-cookie" not in cross.headers
        ok = client.post("/console/login", data={"key": ADMIN_KEY})
        assert ok.status_code == 303
        set_cookie = ok.headers["set-cookie"]
        for attr in ("HttpOnly", "SameSite=Strict", "Path=/console"):
            assert attr in set_cookie
        assert ADMIN_KEY not in set_cookie
        for path in ("/console", "/console/status", "/console/static/console.js", "/console/login"):
            r = client.get(path)
            assert r.status_code == 200, (path, r.status_code)
            csp = r.headers["content-security-policy"]
            assert all(part in csp for part in CSP_PARTS)
            assert "unsafe" not in csp
            assert r.headers["x-content-type-options"] == "nosniff"
        assert client.get("/console/static/../settings.py").status_code == 404
        client.cookies.clear()
        client.cookies.set("genmesh_console", "9999999999.forged", path="/console")
        assert client.get("/console/status").status_code == 401


def test_logout_refuses_other_sites_and_login_is_throttled_per_address(
    start_gateway: StartGateway, fake_upstream: Server
) -> None:
    flags = ("--console-login-attempts", "3", "--console-login-window-s", "60")
    gw = start_gateway({"m": model_config(fake_upstream.url)}, "--auth", "on", *flags)
    with httpx.Client(base_url=gw.url, timeout=10, follow_redirects=False) as client:
        assert client.post("/console/login", data={"key": ADMIN_KEY}).status_code == 303
        for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
            cross = client.post("/console/logout", headers=headers)
            assert cross.status_code == 403
            assert "set-cookie" not in cross.headers
            assert client.get("/console/status").status_code == 200  # still signed in
        out = client.post("/console/logout", headers={"Origin": gw.url})
        assert out.status_code == 303
        assert "Max-Age=0" in out.headers["set-cookie"]
        # three failures in the window, then even the right key waits
        for _ in range(3):
            assert client.post("/console/login", data={"key": "wrong-guess"}).status_code == 401
        throttled = client.post("/console/login", data={"key": ADMIN_KEY})
        assert throttled.status_code == 429
        assert 1 <= int(throttled.headers["retry-after"]) <= 60
        assert "set-cookie" not in throttled.headers
        assert throttled.headers["content-security-policy"]


def test_status_schema_and_computed_once_per_interval(start_gateway: StartGateway, fake_upstream: Server) -> None:
    gw = start_gateway({"m": model_config(fake_upstream.url)}, "--auth", "on", "--console-interval-s", "2")
    wait_until(lambda: status(gw.url)["seq"] >= 1, 10, what="a first status")
    first_status = status(gw.url)
    jsonschema.validate(first_status, SCHEMA)
    assert [(u["circuit"], u["circuit_cause"]) for u in first_status["upstreams"]] == [("closed", "")]
    # forty viewers polling at once get one snapshot, computed once: at most two in one second
    seen: list[tuple[int, float]] = []

    def viewer() -> None:
        for _ in range(4):
            s = status(gw.url)
            seen.append((s["seq"], s["computed_at"]))

    started = time.monotonic()
    viewers = [threading.Thread(target=viewer) for _ in range(10)]
    for v in viewers:
        v.start()
    for v in viewers:
        v.join(30)
    elapsed = time.monotonic() - started
    assert len(seen) == 40
    seqs = {seq for seq, _ in seen}
    assert len(seqs) <= 1 + int(elapsed / 2) + 1, (seqs, elapsed)
    assert len({(seq, at) for seq, at in seen}) == len(seqs)  # one computation per seq, shared
    # and it is live: a later interval gives a new one
    first = max(seqs)
    wait_until(lambda: status(gw.url)["seq"] > first, 10, what="the next interval's status")


def test_open_without_auth_and_redis_outage_banner(
    browser: WebDriver, start_gateway: StartGateway, fake_upstream: Server, redis_server: RedisServer
) -> None:
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    gw = start_gateway({"m": model_config(fake_upstream.url)}, "--auth", "off", redis_url=dead_redis)
    r = httpx.get(gw.url + "/console/status", timeout=10)
    assert r.status_code == 200
    assert r.json()["redis"]["ok"] is False
    browser.get(gw.url + "/console")
    wait_until(lambda: browser.find_element(By.ID, "banner").is_displayed(), 15, what="the Redis banner")
    assert "Redis is unreachable" in browser.find_element(By.ID, "banner").text
    wait_until(lambda: cells(browser, "upstreams") and cells(browser, "upstreams")[0][1] != "", 10, what="upstreams")
    assert cells(browser, "models")[0][0] == "m"


def test_every_replica_shows_the_same_charts(start_gateway: StartGateway, fake_upstream: Server) -> None:
    models = {"m": model_config(fake_upstream.url)}
    a = start_gateway(models, "--auth", "on", "--console-interval-s", "0.5")
    b = start_gateway(models, "--auth", "on", "--console-interval-s", "0.5")

    def same_picture() -> bool:
        sa, sb = status(a.url), status(b.url)
        return (
            sa["replicas"] == sb["replicas"] == 2
            and len(sa["history"]["queue_depth"]) >= 6
            and sa["history"]["queue_depth"][:6] == sb["history"]["queue_depth"][:6]
        )

    wait_until(same_picture, 20, what="both replicas to show two replicas and the same history")
    # two replicas sampling every 0.5 s write one sample per interval between them, not two
    times = [t for t, _ in status(a.url)["history"]["queue_depth"]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.5 * 0.8 - 0.001, gaps


def test_replicas_publish_only_while_a_console_is_open(
    start_gateway: StartGateway, fake_upstream: Server, redis_server: RedisServer
) -> None:
    prefix = "viewed"
    flags = ("--auth", "on", "--console-interval-s", "0.3", "--console-viewed-ttl-s", "1.5", "--redis-prefix", prefix)
    models = {"m": model_config(fake_upstream.url)}
    a = start_gateway(models, *flags)
    start_gateway(models, *flags)  # b: never asked for its status
    r = redis_server.client()
    viewed, replicas = f"{prefix}:{{console}}:viewed", f"{prefix}:{{console}}:replicas"
    history = f"{prefix}:{{console}}:history:queue_depth"

    def marker_checks() -> int:
        """EXISTS calls so far: each replica's status loop makes one per interval while nobody watches."""
        return int(r.info("commandstats").get("cmdstat_exists", {}).get("calls", 0))

    def idle_intervals(n: int) -> None:
        base = marker_checks()
        wait_until(lambda: marker_checks() >= base + 2 * n, 20, what=f"{n} idle intervals of both replicas")

    # nobody watching: both loops only check the marker; nothing is published, computed or sampled
    idle_intervals(5)
    assert not r.exists(viewed)
    assert not r.exists(replicas)
    assert not r.exists(history)

    # a console opens on a: its first answer is a fresh computation, not a stale or empty snapshot
    first = status(a.url)
    assert first["seq"] >= 1, first
    assert first["redis"]["ok"], first
    assert time.time() - first["computed_at"] < 5
    ttl_ms = r.pttl(viewed)
    assert 0 < ttl_ms <= 1500, ttl_ms
    # b, never asked, publishes its activity while the marker lives: a counts two replicas
    wait_until(lambda: status(a.url)["replicas"] == 2, 10, what="the unviewed replica to publish")
    assert len(r.hkeys(replicas)) == 2
    assert status(a.url)["gateway_id"].encode() in r.hkeys(replicas)
    wait_until(lambda: r.zcard(history) >= 3, 10, what="chart samples while viewed")

    # the console closes: the marker lapses after its TTL, and then nothing more is written
    wait_until(lambda: not r.exists(viewed), 10, what="the viewed marker to expire")
    idle_intervals(2)  # a replica may finish the interval it was in
    published, samples = r.hgetall(replicas), r.zcard(history)
    idle_intervals(5)
    assert r.hgetall(replicas) == published
    assert r.zcard(history) == samples
    assert not r.exists(viewed)


def test_engine_metrics_scan_reads_what_a_prometheus_parser_reads() -> None:
    """The console's line scan of an engine's /metrics against prometheus_client's parser, on a real
    engine registry with two models (one with a brace and a space in its label), histograms and restarts."""
    families = MetricFamilies()
    for model, running, waiting, kv in (("a", 2, 5, 0.25), ('b} "x y', 1, 0, 0.5)):
        families.running.labels(model).set(running)
        families.waiting.labels(model).set(waiting)
        families.kv_cache_usage.labels(model).set(kv)
        families.ttft.labels(model).observe(0.3)
        families.core_restarts.labels(model, "hung").inc(3)
        families.core_restarts.labels(model, "exited")
    families.draft_steps.labels("a").inc(10)  # a drafting engine: 15 of 40 proposed tokens accepted
    families.draft_accepted.labels("a").inc(15)
    families.draft_proposed.labels("a").inc(40)
    text = families.render().decode()
    wanted = {
        "genmesh_engine_kv_cache_usage_ratio": "kv_cache_usage",
        "genmesh_engine_requests_running": "running",
        "genmesh_engine_requests_waiting": "waiting",
        "genmesh_engine_core_restarts_total": "restarts",
        "genmesh_engine_spec_decode_steps_total": "draft_steps",
        "genmesh_engine_spec_decode_accepted_tokens_total": "draft_accepted",
        "genmesh_engine_spec_decode_draft_tokens_total": "draft_proposed",
    }
    expected: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                expected[wanted[sample.name]] = expected.get(wanted[sample.name], 0.0) + sample.value
    drafts = {"draft_steps": 10.0, "draft_accepted": 15.0, "draft_proposed": 40.0}
    assert expected == {"kv_cache_usage": 0.75, "running": 3.0, "waiting": 5.0, "restarts": 6.0, **drafts}
    assert engine_metrics.parse(text) == expected
    assert drafting(expected) == {"draft_accepted_per_step": 1.5, "draft_acceptance": 0.375}
    assert drafting({"kv_cache_usage": 0.1}) == {"draft_accepted_per_step": None, "draft_acceptance": None}
    plain = {"draft_steps": 10.0, "draft_accepted": 0.0}  # every engine counts its steps; this one drafts nothing
    assert drafting(plain) == {"draft_accepted_per_step": None, "draft_acceptance": None}
    assert engine_metrics.parse('# HELP nothing\nother_metric 1\ngenmesh_engine_requests_running{m="a"} x\n') == {}


def test_engine_metrics_tell_each_model_s_state() -> None:
    """Issue 54: the console reads each served model's state from its engine's /metrics (a real engine
    registry): serving, not serving (loading, a core restarting), or failed to load and skipped."""
    families = MetricFamilies()
    served = (("chat", "chat", 1, 0), ('v} "x\\', "speech", 0, 1), ("w", "transcription", 0, 0))
    for model, kind, ready, failed in served:
        families.model_ready.labels(model, kind).set(ready)
        families.model_load_failed.labels(model, kind).set(failed)
    states = engine_metrics.model_states(families.render().decode())
    assert states == {"chat": "serving", 'v} "x\\': "failed", "w": "not serving"}
    assert engine_metrics.model_states("genmesh_engine_requests_running 1\n") == {}
