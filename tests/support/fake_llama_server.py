"""A test double of llama.cpp's ``llama-server`` for the peer's form choice (tests/bench/test_bench_llama_form.py):
``python tests/support/fake_llama_server.py [llama-server flags] --port N`` (it imports nothing of ours).

The real failure it stands for, llama.cpp's AMX repack crashing, happens only on Sapphire Rapids CPUs with AMX,
so it cannot be had here. Without ``--no-repack`` it dies of SIGSEGV where ``FAKE_LLAMA_CRASH`` says: ``start``
(before it listens), ``request`` (on its first chat request), ``always`` (on start, with ``--no-repack`` too) or
``never``. Otherwise it serves ``GET /health`` and a minimal non-streamed ``POST /v1/chat/completions``. Each
start appends its argv, as one JSON line, to the file ``FAKE_LLAMA_ARGV`` names.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def crash() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the caller's folder
    os.kill(os.getpid(), signal.SIGSEGV)


class Handler(BaseHTTPRequestHandler):
    crash_on_request = False

    def reply(self, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.reply({"status": "ok"})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.crash_on_request:
            crash()
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        message = {"role": "assistant", "content": "Hi"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        self.reply({"object": "chat.completion", "choices": [{"index": 0, "message": message}], "usage": usage})

    def log_message(self, format: str, *args: object) -> None:
        pass


def main(argv: list[str]) -> None:
    if log := os.environ.get("FAKE_LLAMA_ARGV"):
        with open(log, "a") as f:
            f.write(json.dumps(argv) + "\n")
    where = os.environ.get("FAKE_LLAMA_CRASH", "start")
    repacked = "--no-repack" not in argv
    if where == "always" or (where == "start" and repacked):
        crash()
    Handler.crash_on_request = where == "request" and repacked
    server = ThreadingHTTPServer(("127.0.0.1", int(argv[argv.index("--port") + 1])), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
