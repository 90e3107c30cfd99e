"""Gateway peak memory while a large file goes up to and comes back from ``/v1/files``.

Starts a private redis-server (``--maxmemory``, noeviction) and one gateway (run by ``--python``, so
two checkouts can be compared), uploads a JSONL file of ``--size-mib`` MiB, downloads it streamed,
checks it byte-exact, and prints the gateway's peak RSS (``VmHWM``) after start, after the upload
and after the download, and Redis' ``used_memory``:

    nice -n 10 .venv/bin/python scripts/file_rss.py --size-mib 100
    nice -n 10 .venv/bin/python scripts/file_rss.py --size-mib 100 --python /other/checkout/.venv/bin/python
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except (OSError, httpx.HTTPError, redis.RedisError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_file(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    line = b'{"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "body": {"pad": "' + b"x" * 4000
    line += b'"}}\n'
    with path.open("wb") as f:
        written = 0
        while written < size:
            piece = line[: size - written]
            f.write(piece)
            digest.update(piece)
            written += len(piece)
    return digest.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=100)
    p.add_argument("--python", default=sys.executable, help="the interpreter whose genmesh.gateway runs")
    p.add_argument("--maxmemory", default="1gb")
    p.add_argument("--gateway-arg", action="append", default=[], help="extra gateway flag (repeatable)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="file-rss-"))
    rport, gport = free_port(), free_port()
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (make redis)"
    rargv = [binary, "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    rargv += ["--maxmemory", args.maxmemory, "--maxmemory-policy", "noeviction", "--dir", str(work)]
    procs = [subprocess.Popen(rargv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)]
    try:
        rc = redis.Redis(port=rport)
        wait(rc.ping, 10, "redis")
        cfg = work / "gateway.yaml"
        cfg.write_text('models: {m: {upstreams: [{url: "http://127.0.0.1:9", max_concurrency: 1}]}}\n')
        gargv = [args.python, "-m", "genmesh.gateway", "--config", str(cfg), "--port", str(gport)]
        gargv += ["--redis-url", f"redis://127.0.0.1:{rport}/0", "--auth", "off", "--host", "127.0.0.1"]
        gargv += args.gateway_arg
        log = (work / "gateway.log").open("wb")
        gw = subprocess.Popen(gargv, stdout=log, stderr=subprocess.STDOUT)
        procs.append(gw)
        url = f"http://127.0.0.1:{gport}"
        wait(lambda: httpx.get(url + "/health", timeout=2).status_code == 200, 120, "the gateway")
        started = peak_rss_mib(gw.pid)
        data = work / "big.jsonl"
        sha = make_file(data, args.size_mib * 1024 * 1024)
        t0 = time.monotonic()
        with data.open("rb") as f:
            r = httpx.post(url + "/v1/files", files={"file": ("big.jsonl", f)}, data={"purpose": "batch"}, timeout=600)
        assert r.status_code == 200, r.text
        up_s = time.monotonic() - t0
        uploaded = peak_rss_mib(gw.pid)
        used = int(rc.info("memory")["used_memory"])
        digest = hashlib.sha256()
        t0 = time.monotonic()
        error = None
        try:
            with httpx.stream("GET", f"{url}/v1/files/{r.json()['id']}/content", timeout=600) as resp:
                for piece in resp.iter_raw():
                    digest.update(piece)
        except httpx.HTTPError as exc:  # e.g. a reply sent whole that passes --send-timeout-s
            error = f"{type(exc).__name__}: {exc}"
        down_s = time.monotonic() - t0
        assert error is not None or digest.hexdigest() == sha, "the download differs from the upload"
        report = {
            "size_mib": args.size_mib,
            "gateway_peak_rss_mib": {
                "started": round(started),
                "after_upload": round(uploaded),
                "after_download": round(peak_rss_mib(gw.pid)),
            },
            "redis_used_memory_mib_after_upload": round(used / 2**20),
            "upload_s": round(up_s, 2),
            "download_s": round(down_s, 2),
            "download_error": error,
        }
        print(json.dumps(report))
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
