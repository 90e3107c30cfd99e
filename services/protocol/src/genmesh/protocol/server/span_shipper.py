"""Recorded spans carried to the service's span exporter, a child process, without ever blocking.

The service appends each ended span's record (``span_recorder``) to a short list; every
``trace_batch_records`` records, and every ``trace_flush_interval_s`` from a background thread (the
service's ``TracingLimits`` settings), the list is
``marshal``-ed into one length-prefixed frame and written to a Unix socket pair whose other end the
exporter reads (``span_export``, the OpenTelemetry SDK's batch processor and OTLP exporter). Writes
are non-blocking: what the socket does not take waits in a buffer of at most ``trace_buffer_bytes``,
and a frame that would overflow it is dropped and counted. So a slow exporter (a slow collector
behind it) costs the service nothing but the dropped spans, and memory stays bounded.

The service owns the exporter: if it exits, the background thread starts another (at most one try
every ``trace_exporter_restart_backoff_s``; spans in between are dropped and counted). The exporter exits when the
socket closes, so it never outlives its service, even one killed with SIGKILL. Frames back from the
exporter say whether it started (``ready`` or the SDK's refusal of an ``OTEL_*`` setting) and how many
spans its own queue dropped.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from .limits import TracingLimits
from .span_recorder import Record

log = logging.getLogger("genmesh.tracing")

DROP_LOG_INTERVAL_S = 60.0  # at most one warning a minute about dropped spans
HEADER = struct.Struct("!I")  # a frame: its length, then a marshal-ed list of records (or a report)
EXPORTER_MODULE = "genmesh.protocol.server.span_export"


class ExporterRefused(RuntimeError):
    """The exporter did not start: an ``OTEL_*`` setting the SDK refuses, or no answer in time."""


def frame(value: Any) -> bytes:
    data = marshal.dumps(value)
    return HEADER.pack(len(data)) + data


def read_frames(buffer: bytearray) -> list[Any]:
    """The complete frames at the start of ``buffer`` (removed from it)."""
    out = []
    while len(buffer) >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer)
        if len(buffer) < HEADER.size + size:
            break
        out.append(marshal.loads(bytes(buffer[HEADER.size : HEADER.size + size])))
        del buffer[: HEADER.size + size]
    return out


def _plain(value: Any) -> Any:
    """``value`` as ``marshal`` carries it: built-in scalars and sequences of them; else its ``str``."""
    if value is None or isinstance(value, str | bool | int | float | bytes):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def _plain_record(record: Record) -> Record:
    attrs = {str(k): _plain(v) for k, v in record[12].items()}
    events = tuple((name, ts, {str(k): _plain(v) for k, v in a.items()}) for name, ts, a in record[13])
    links = tuple((*link[:4], {str(k): _plain(v) for k, v in link[4].items()}) for link in record[14])
    return (*record[:11], _plain(record[11]), attrs, events, links)


class SpanShipper:
    """The service's side of the span exporter: a bounded, non-blocking path to a child process."""

    def __init__(self, service_name: str, log_level: str = "INFO", limits: TracingLimits | None = None) -> None:
        self.service_name = service_name
        self.log_level = log_level
        self.limits = limits if limits is not None else TracingLimits()
        self.dropped_here = 0  # frames' spans this side dropped (buffer full, exporter away)
        self.dropped_there = 0  # spans the exporter's queue dropped (collector slow or down)
        self._pending: list[Record] = []
        self._lock = threading.Lock()  # the pending list and the socket's buffer
        self._out = bytearray()
        self._in = bytearray()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_at = -self.limits.trace_exporter_restart_backoff_s
        self._said_at = -DROP_LOG_INTERVAL_S
        self._said_dropped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def dropped(self) -> int:
        return self.dropped_here + self.dropped_there

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the exporter and wait until it is ready; ``ExporterRefused`` if it is not."""
        self._spawn(wait=True)
        self._thread = threading.Thread(target=self._run, name="span-shipper", daemon=True)
        self._thread.start()

    def _spawn(self, wait: bool) -> None:
        self._started_at = time.monotonic()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-m", EXPORTER_MODULE, "--fd", str(theirs.fileno())]
        argv += ["--service", self.service_name, "--log-level", self.log_level]
        try:
            proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        if wait:
            ours.settimeout(self.limits.trace_exporter_start_timeout_s)
            try:
                first = self._first_report(ours, self.limits.trace_exporter_start_timeout_s)
            except (OSError, ValueError, EOFError) as exc:
                first = ("error", f"the span exporter did not start: {exc}")
            if first[0] != "ready":
                ours.close()
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
                raise ExporterRefused(str(first[1]) if len(first) > 1 else "the span exporter did not start")
        ours.setblocking(False)
        with self._lock:
            old, self._sock, self._proc = self._sock, ours, proc
            self._out.clear()
            self._in.clear()
        if old is not None:
            old.close()

    @staticmethod
    def _first_report(sock: socket.socket, timeout_s: float) -> tuple[Any, ...]:
        buffer = bytearray()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                return ("error", "the span exporter exited before it was ready (see its log lines above)")
            buffer += chunk
            frames = read_frames(buffer)
            if frames:
                return tuple(frames[0])
        return ("error", f"the span exporter did not answer in {timeout_s:g} s")

    # -- the request path ------------------------------------------------------------------------------

    def add(self, record: Record) -> None:
        """An ended span's record; sent with the next frame (``RecordedSpan``'s sink)."""
        with self._lock:
            pending = self._pending
            pending.append(record)
            if len(pending) < self.limits.trace_batch_records:
                return
            self._pending = []
        self._send(pending)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        self._send(pending)

    def _send(self, records: list[Record]) -> None:
        if records:
            try:
                data = frame(records)
            except ValueError:  # an attribute value marshal does not carry (a caller's object): its str
                data = frame([_plain_record(r) for r in records])
        with self._lock:
            if records:
                if len(self._out) + len(data) > self.limits.trace_buffer_bytes or self._sock is None:
                    self.dropped_here += len(records)
                else:
                    self._out += data
            if self._out and self._sock is not None:
                try:
                    sent = self._sock.send(self._out)
                except BlockingIOError:
                    return
                except OSError:  # the exporter is gone; the background thread starts another
                    self.dropped_here += len(records)
                    self._out.clear()
                    return
                del self._out[:sent]

    # -- the background thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.limits.trace_flush_interval_s):
            try:
                self.flush()
                self._read_reports()
                self._keep_exporter()
                self._say_dropped()
            except Exception:  # never let the thread die: log, and go on next tick
                log.exception("span shipper: unexpected error")

    def _read_reports(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return
            if not chunk:
                break
            self._in += chunk
        for report in read_frames(self._in):
            if report and report[0] == "dropped":
                self.dropped_there = max(self.dropped_there, int(report[1]))

    def _keep_exporter(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is None:
            return
        if time.monotonic() - self._started_at < self.limits.trace_exporter_restart_backoff_s:
            return
        log.warning("span exporter exited (code %s); starting another", proc.returncode)
        self.dropped_here += self.dropped_there  # what it had dropped stays counted; the new one counts from 0
        self.dropped_there = 0
        try:
            self._spawn(wait=False)
        except OSError as exc:
            log.error("span exporter: cannot start another: %s", exc)

    def _say_dropped(self) -> None:
        dropped = self.dropped
        if dropped > self._said_dropped:
            self._said_dropped = dropped
            now = time.monotonic()
            if now - self._said_at >= DROP_LOG_INTERVAL_S:
                self._said_at = now
                log.warning("trace collector slow or down: dropping spans (queue full; %d so far)", dropped)

    # -- stopping ------------------------------------------------------------------------------------------

    def shutdown(self, timeout_s: float) -> None:
        """Send what is pending, let the exporter export it (at most ``timeout_s``), and stop it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.flush()
        deadline = time.monotonic() + timeout_s
        sock, proc = self._sock, self._proc
        if sock is not None:
            with contextlib.suppress(OSError):
                while self._out and select.select([], [sock], [], max(0.0, deadline - time.monotonic()))[1]:
                    with self._lock, contextlib.suppress(BlockingIOError):
                        del self._out[: sock.send(self._out)]
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)  # the exporter's end of input: it exports and exits
        if proc is not None:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if sock is not None:
            sock.close()
        self._sock = None
