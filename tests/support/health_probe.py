"""Time every URL given, round-robin, until standard input closes; then write the latencies (ms) as JSON.

python tests/support/health_probe.py OUT.json NAME=URL...   (the hostile suite runs it; loopback only)
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx

INTERVAL_S = 0.02  # one probe of each URL per 20 ms


def main() -> int:
    out = sys.argv[1]
    urls = dict(arg.split("=", 1) for arg in sys.argv[2:])
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    failures: dict[str, int] = {name: 0 for name in urls}
    slow: list[tuple[float, str, float]] = []  # (wall-clock time, name, ms) of probes over 50 ms
    with httpx.Client(timeout=5.0) as client:
        while not done.is_set():
            for name, url in urls.items():
                started = time.perf_counter()
                try:
                    ok = client.get(url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                ms = (time.perf_counter() - started) * 1000
                latencies[name].append(ms)
                if ms > 50:
                    slow.append((time.time(), name, ms))
                failures[name] += 0 if ok else 1
            done.wait(INTERVAL_S)
    with open(out, "w") as f:
        json.dump({"latencies_ms": latencies, "failures": failures, "slow": slow}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
