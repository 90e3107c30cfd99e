# ruff: noqa: E501  (the corpus is a table: one case a line)
"""The hostile-input suite's corpus and checks (tests/hostile): every class of input issue 14 names,
sent as raw bytes to every hop, and what each answer must be.

An answer is acceptable when it is not a 5xx, and a 4xx is OpenAI error JSON under 4 KB. A 2xx is
acceptable too (the corpus holds a few valid requests, and limits on their edges). Figures (requests
per hop, 5xx seen, /health p99, slot-release time) are kept in ``FIGURES`` for the summary.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from genmesh.protocol.native_errors import NATIVE_PATHS
from support.servers import MODEL_NAME, Server, free_port, start_server

FULL = os.environ.get("GENMESH_FUZZ", "") == "full"
MAX_ERROR_BYTES = 4096
FIGURES: list[tuple[str, str, float, str]] = []  # what, hop, value, limit
COUNTS: dict[str, dict[str, int]] = {}  # hop -> {"sent": n, "5xx": n}
STARTED: list[tuple[float, str]] = []  # when each hostile test began (to tell which one a slow probe met)
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def record(what: str, hop: str, value: float, limit: str = "") -> float:
    FIGURES.append((what, hop, value, limit))
    return value


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: bytes
    content_type: str = "application/json"


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _nest(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def _deep_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def corpus() -> list[Case]:
    """Every class of hostile input, for both completion endpoints."""
    big = 2**64 + 5
    cases = [
        # lone UTF-16 surrogates, as JSON escapes, wherever a string goes
        Case("surrogate in content", CHAT, b'{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2}'),
        Case("low surrogate alone", CHAT, b'{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}'),
        Case("surrogate in model", CHAT, b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}'),
        Case("surrogate in a key", CHAT, b'{"\\ud800": 1, "messages": [{"role": "user", "content": "hi"}]}'),
        Case("surrogate in stop", COMP, b'{"prompt": "hi", "stop": ["\\ud800"], "max_tokens": 2}'),
        Case("surrogate in prompt", COMP, b'{"prompt": "\\ud800", "max_tokens": 2}'),
        Case("invalid utf-8 bytes", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
        # nesting
        Case("1100-deep array", CHAT, ('{"messages": ' + _nest(1100) + "}").encode()),
        Case("1100-deep top level", CHAT, _nest(1100).encode()),
        Case("100-deep object", CHAT, ('{"messages": [{"role": "user", "content": "hi"}], "metadata": ' + '{"a": ' * 100 + "1" + "}" * 100 + "}").encode()),
        Case("70-deep in messages", CHAT, ('{"messages": [{"role": "user", "content": "hi", "x": ' + _nest(70) + "}]}").encode()),
        Case("100000-deep array", COMP, ('{"prompt": ' + _nest(100_000) + "}").encode()),
        # integers past their range
        Case("seed past 64 bits", CHAT, _j({"messages": MSG, "seed": big, "max_tokens": 2})),
        Case("seed 2**63", COMP, _j({"prompt": "hi", "seed": 2**63, "max_tokens": 2})),
        Case("seed negative past 64 bits", COMP, _j({"prompt": "hi", "seed": -big, "max_tokens": 2})),
        Case("seed huge literal", COMP, b'{"prompt": "hi", "max_tokens": 2, "seed": ' + b"9" * 5000 + b"}"),
        Case("stop_token_ids past 64 bits", CHAT, _j({"messages": MSG, "stop_token_ids": [big], "max_tokens": 2})),
        Case("stop_token_ids negative", COMP, _j({"prompt": "hi", "stop_token_ids": [-1], "max_tokens": 2})),
        Case("max_tokens past 64 bits", CHAT, _j({"messages": MSG, "max_tokens": big})),
        Case("n past 64 bits", CHAT, _j({"messages": MSG, "n": big})),
        Case("top_k past 64 bits", COMP, _j({"prompt": "hi", "top_k": big, "max_tokens": 2})),
        Case("prompt ids past 64 bits", COMP, _j({"prompt": [big], "max_tokens": 2})),
        # floats that are not numbers
        Case("temperature NaN", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'),
        Case("temperature Infinity", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}'),
        Case("top_p 1e999", COMP, b'{"prompt": "hi", "top_p": 1e999, "max_tokens": 2}'),
        Case("length_penalty -1e999", COMP, b'{"prompt": "hi", "length_penalty": -1e999, "max_tokens": 2}'),
        # token ids outside the vocabulary
        Case("prompt id out of vocabulary", COMP, _j({"prompt": [999999], "max_tokens": 2})),
        Case("prompt batch id out of vocabulary", COMP, _j({"prompt": [[1, 2, 999999]], "max_tokens": 2})),
        Case("stop id out of vocabulary", COMP, _j({"prompt": "hi", "stop_token_ids": [999999], "max_tokens": 2})),
        # structured output: deep and wide schemas, odd constraints
        Case("response_format 150 deep", CHAT, _j({"messages": MSG, "max_tokens": 2, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": _deep_schema(150)}}})),
        Case("response_format 40 deep", CHAT, _j({"messages": MSG, "max_tokens": 2, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": _deep_schema(40)}}})),
        Case("guided_json 60 deep", COMP, _j({"prompt": "hi", "max_tokens": 2, "guided_json": _deep_schema(60)})),
        Case("schema with 5000 properties", CHAT, _j({"messages": MSG, "max_tokens": 2, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}}}})),
        Case("guided_json as a broken string", COMP, _j({"prompt": "hi", "max_tokens": 2, "guided_json": "{" * 5000})),
        Case("guided_regex evil", COMP, _j({"prompt": "hi", "max_tokens": 2, "guided_regex": "(a+)+$" * 200})),
        Case("guided_grammar garbage", COMP, _j({"prompt": "hi", "max_tokens": 2, "guided_grammar": "root ::= " + "(" * 3000})),
        Case("guided_choice 10000", COMP, _j({"prompt": "hi", "max_tokens": 2, "guided_choice": [f"c{i}" for i in range(10000)]})),
        Case("tool parameters 150 deep", CHAT, _j({"messages": MSG, "max_tokens": 2, "tools": [{"type": "function", "function": {"name": "f", "parameters": _deep_schema(150)}}], "tool_choice": "required"})),
        # big names, keys and values: errors quote at most ~200 characters
        Case("1 MB model name", CHAT, _j({"model": "m" * 1_000_000, "messages": MSG})),
        Case("100 KB unknown key", CHAT, _j({"k" * 100_000: 1, "messages": MSG})),
        Case("100 KB role", CHAT, _j({"messages": [{"role": "r" * 100_000, "content": "hi"}]})),
        Case("100 KB stop list", COMP, _j({"prompt": "hi", "max_tokens": 2, "stop": ["s" * 100] * 1000})),
        Case("100 KB tool name", CHAT, _j({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f" * 100_000}}]})),
        Case("100 KB chat_template_kwargs", CHAT, _j({"messages": MSG, "max_tokens": 2, "chat_template_kwargs": {"x" * 100_000: "y"}})),
        Case("10000 messages", CHAT, _j({"messages": [{"role": "user", "content": "hi"}] * 10_000, "max_tokens": 2})),
        Case("3 MB prompt", COMP, _j({"prompt": "word " * 600_000, "max_tokens": 2})),
        Case("3 MB message", CHAT, _j({"messages": [{"role": "user", "content": "word " * 600_000}], "max_tokens": 2})),
        Case("control characters", CHAT, _j({"messages": [{"role": "user", "content": "\x00\x01\x1b[2J\u202e"}], "max_tokens": 2})),
        # wrong shapes
        Case("empty body", CHAT, b""),
        Case("not json", CHAT, b"hello"),
        Case("json array", COMP, b"[1, 2, 3]"),
        Case("json null", COMP, b"null"),
        Case("messages a number", CHAT, _j({"messages": 7})),
        Case("messages null", CHAT, _j({"messages": None})),
        Case("message content an object", CHAT, _j({"messages": [{"role": "user", "content": {"a": 1}}]})),
        Case("prompt an object", COMP, _j({"prompt": {"a": 1}})),
        Case("stream a string", CHAT, _j({"messages": MSG, "stream": "yes", "max_tokens": 2})),
        Case("stream_options wrong", CHAT, _j({"messages": MSG, "stream": True, "stream_options": 5, "max_tokens": 2})),
        Case("model a list", CHAT, _j({"model": ["a"], "messages": MSG})),
        Case("form body", CHAT, b"messages=hi", "application/x-www-form-urlencoded"),
        Case("logit_bias 10000 keys", CHAT, _j({"messages": MSG, "logit_bias": {str(i): 1 for i in range(10000)}})),
        Case("n 50", CHAT, _j({"messages": MSG, "n": 50, "max_tokens": 2})),
        Case("best_of huge", COMP, _j({"prompt": "hi", "best_of": 2**31 - 1, "max_tokens": 2})),
        Case("stream with error", COMP, _j({"prompt": [999999], "stream": True})),
        # valid requests at the edges of the limits
        Case("valid chat", CHAT, _j({"messages": MSG, "max_tokens": 2})),
        Case("valid stream", COMP, _j({"prompt": "hi", "max_tokens": 2, "stream": True})),
        Case("valid 64 deep metadata", CHAT, ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "metadata": ' + '{"a": ' * 62 + "1" + "}" * 62 + "}").encode()),
    ]  # fmt: skip
    return cases


@dataclass
class Verdict:
    status: int
    size: int
    problem: str | None


def judge(response: httpx.Response) -> Verdict:
    """What is wrong with an answer (None: nothing)."""
    status, body = response.status_code, response.content
    if status >= 500:
        return Verdict(status, len(body), f"{status}: {body[:300]!r}")
    if status < 400:
        return Verdict(status, len(body), None)
    if len(body) >= MAX_ERROR_BYTES:
        return Verdict(status, len(body), f"{status} body of {len(body)} bytes")
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return Verdict(status, len(body), f"{status} is not OpenAI error JSON: {body[:300]!r}")
    # TEI's and TGI's routes: their errors are {"error": str, "error_type": str} (docs/native-apis.md)
    if response.request.url.path in NATIVE_PATHS:
        if not (isinstance(err, str) and err and isinstance(json.loads(body).get("error_type"), str)):
            return Verdict(status, len(body), f"{status} is not TEI/TGI error JSON: {body[:300]!r}")
    elif not isinstance(err, dict) or set(err) != {"message", "type", "param", "code"} or not err["message"]:
        return Verdict(status, len(body), f"{status} error fields wrong: {body[:300]!r}")
    if status in (429, 503) and "retry-after" not in response.headers:
        return Verdict(status, len(body), f"{status} without Retry-After")
    return Verdict(status, len(body), None)


def count(hop: str, verdict: Verdict) -> None:
    c = COUNTS.setdefault(hop, {"sent": 0, "5xx": 0})
    c["sent"] += 1
    if verdict.status >= 500:
        c["5xx"] += 1


@dataclass
class Hop:
    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    health: str = "/health"


# --- raw sockets: what httpx will not send (slow bytes, a body the server refuses mid-way) ---------


def memory_status(pid: int, field: str = "VmHWM") -> int:
    """A process's memory figure from /proc/PID/status, in bytes (``VmHWM``: its peak RSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def connect(url: str, rcvbuf: int | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    return sock


def request_head(path: str, host: str, length: int | None, extra: dict[str, str] | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_status(sock: socket.socket) -> tuple[int, bytes]:
    """The status and what came with it, read until the server closes or the head is in."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            while len(body) < int(value):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
    return int(data[9:12]), head + b"\r\n\r\n" + body


def closed_within(sock: socket.socket, deadline_s: float) -> float:
    """Seconds until the server closes ``sock`` (reading whatever it sends); fails past ``deadline_s``."""
    started = time.monotonic()
    sock.settimeout(0.5)
    while time.monotonic() - started < deadline_s:
        try:
            if not sock.recv(65536):
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    raise AssertionError(f"the server kept the connection open past {deadline_s} s")


def drip(sock: socket.socket, payload: bytes, every_s: float, until_s: float) -> float:
    """Send ``payload`` a byte at a time, ``every_s`` apart, until the server closes; seconds taken."""
    started = time.monotonic()
    sock.settimeout(every_s)
    for byte in payload:
        try:
            sock.sendall(bytes([byte]))
            if not sock.recv(65536):
                return time.monotonic() - started
            return time.monotonic() - started  # it answered (408) and will close
        except TimeoutError:
            pass
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        if time.monotonic() - started > until_s:
            break
    raise AssertionError(f"the server still reads a dripping request after {until_s} s")


def iter_sse(sock: socket.socket) -> Iterator[bytes]:
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return
        yield chunk


# --- the services under test ---------------------------------------------------------------------


def start_microservice(log_dir: Path, engine_url: str, *extra: str) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", engine_url, "--port", str(port)]
    argv += ["--model-id", MODEL_NAME, *extra]
    return start_server("microservice", argv, port, log_dir, health_path="/v1/health_check", env={"OPENAI_API_KEY": ""})


def route_to(upstream: str, slots: int, **limits: object) -> dict[str, object]:
    route = {"upstreams": [{"url": upstream, "health_path": "/v1/ready", "max_concurrency": slots}]}
    return {"models": {MODEL_NAME: {**route, **limits}}}
