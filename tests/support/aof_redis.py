"""A persistent Redis of a test's own (AOF on, as compose runs it), restartable on the same port and
folder: what survives a restart is what the append-only file kept."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from support.polling import wait_until
from support.servers import free_port


def pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


class AofRedis:
    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed: run 'make redis'"
        self.port = free_port()
        self.folder = folder
        self.argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"]
        self.argv += ["--appendfsync", "everysec"]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, cwd=self.folder, stdout=subprocess.DEVNULL)
        wait_until(lambda: pings(self.port), 10, what="redis-server to answer")

    def stop(self) -> None:
        """A clean stop, which writes the AOF out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
